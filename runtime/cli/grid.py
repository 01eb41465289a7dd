"""``wavepp grid``: every policy over a declared grid of sim settings; JSON + Markdown summary."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from wavepp.runtime.cli.args import Handler, UsageError, int_list, name_list, output_file, positive_int, write_outputs
from wavepp.runtime.engines.model_names import sim_models


def register(sub: Any) -> dict[str, Handler]:
    g = sub.add_parser("grid", help="every policy over a declared grid of sim settings; JSON + Markdown summary")
    g.add_argument("--grid", choices=["paper", "pressure", "kimi-k3"], default="paper",
                   help="paper (default): models x workloads x concurrency, the published study's 40 settings; "
                        "pressure: many distinct long contexts and traces whose working set does not fit the pools "
                        "(runtime/bench/grid_pressure.py); kimi-k3: Kimi-K3 on one B300 node, PP and TP/EP "
                        "deployments of four engines, 4 workloads x c = 1-64 (runtime/bench/grid_kimi.py); "
                        "--models, --workloads and --concurrency apply to paper only")
    g.add_argument("--models", type=name_list, default=["glm-5.2", "minimax-m2.7"],
                   help=f"paper: sim models, a list of {sim_models()}")
    g.add_argument("--hardware", default="b300", help="hardware profile")
    g.add_argument("--pp", type=positive_int, default=4, help="pipeline stages")
    g.add_argument("--workloads", type=name_list, default=["cold", "reuse90", "mixed", "suffix4k", "suffix16k"],
                   help="paper: workloads")
    g.add_argument("--concurrency", type=int_list, default=[8, 32, 64, 128], help="paper: closed-loop concurrencies")
    g.add_argument("--policy", type=name_list, default=None,
                   help="the first is compared with the best of the others, on every grid (default: the grid's own: "
                        "paper and pressure wavepp,trtllm-pp,trtllm-pp-legacy; kimi-k3 wavepp and the PP and TP/EP "
                        "policies of three engines)")
    g.add_argument("--requests", type=positive_int, default=None, help="per run (default: max(512, 4 x c))")
    g.add_argument("--seed", type=int, default=0, help="workload seed")
    g.add_argument("--host-scale", type=float, default=1.0,
                   help="multiply the lockstep host work of a conventional PP loop (sensitivity)")
    g.add_argument("--jobs", type=positive_int, default=1, help="settings run in parallel processes")
    g.add_argument("--perf-dir", default=None, help="the kernel tables (default: ../shared/data/perf)")
    g.add_argument("--json", dest="json_path", type=output_file, default=None, help="write every run's figures here")
    g.add_argument("--markdown", type=output_file, default=None, help="write the summary table here")
    g.add_argument("--quiet", action="store_true", help="no progress bar")
    return {"grid": cmd_grid}


def cmd_grid(args: argparse.Namespace) -> int:
    from wavepp.runtime.bench.grid import DEFAULT_POLICIES, GridSpec, run_grid, summary, to_markdown
    from wavepp.runtime.bench.progress import BenchProgress
    from wavepp.runtime.engines.config import SimConfig
    from wavepp.runtime.engines.sim.engine import SimEngine
    from wavepp.runtime.policies import get_policy
    from wavepp.runtime.sources.workloads import parse_workload

    if args.grid == "pressure":
        from wavepp.runtime.bench.grid_pressure import POLICIES, pressure_spec
        from wavepp.runtime.engines.sim.perf_tables import default_perf_dir
        traces = sorted((default_perf_dir().parent / "traces").glob("*.jsonl"))   # ../shared/data/traces
        try:
            spec = pressure_spec(args.hardware, args.pp, args.models, [Path(t) for t in traces],
                                 policies=args.policy or POLICIES, seed=args.seed, perf_dir=args.perf_dir,
                                 host_scale=args.host_scale)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
    elif args.grid == "kimi-k3":
        from wavepp.runtime.bench.grid_kimi import POLICIES as KIMI_POLICIES
        from wavepp.runtime.bench.grid_kimi import kimi_spec
        try:
            spec = kimi_spec(args.hardware, args.pp, tuple(args.policy or KIMI_POLICIES), seed=args.seed,
                             perf_dir=args.perf_dir, host_scale=args.host_scale)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
    else:
        spec = GridSpec(args.models, args.hardware, args.pp, args.workloads, args.concurrency,
                        args.policy or DEFAULT_POLICIES,
                        args.requests, args.seed, args.perf_dir, args.host_scale)
    try:                                   # every value checked before the first run
        for p in spec.all_policies:
            get_policy(p)
        for s in spec.settings():
            parse_workload(s.workload)
        for m in spec.models:
            SimEngine(SimConfig(m, spec.hardware, spec.pp, perf_dir=spec.perf_dir, host_work_scale=spec.host_scale))
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    with BenchProgress(disabled=args.quiet) as progress:
        rows = run_grid(spec, args.jobs, lambda done, total: progress.update("grid settings", done, total))
    print(summary(rows))
    whole = json.dumps({"summary": summary(rows), "settings": [r.as_dict() for r in rows]}, indent=1)
    write_outputs([(args.json_path, lambda p: Path(p).write_text(whole), f"wrote {args.json_path}"),
                   (args.markdown, lambda p: Path(p).write_text(to_markdown(rows, spec)), f"wrote {args.markdown}")])
    return 0
