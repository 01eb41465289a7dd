"""``wavepp bench``: a workload under policies and concurrencies, side by side, on an in-process
engine (the sim or torch); with ``--url`` against a running ``wavepp serve`` (:mod:`.bench_url`)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from wavepp.runtime.cli import autopilot_args, bench_telemetry
from wavepp.runtime.cli.args import (
    Handler,
    Parser,
    RunFailed,
    UsageError,
    int_list,
    name_list,
    output_file,
    positive_float,
    positive_int,
    write_outputs,
)
from wavepp.runtime.cli.bench_url import cmd_bench_url
from wavepp.runtime.engines.launchers import LAUNCHER_HELP, LAUNCHERS
from wavepp.runtime.engines.model_names import sim_models, torch_models
from wavepp.runtime.engines.sim.perf_tables import PERF_DIR_ENV
from wavepp.runtime.engines.sim.profiles import DEFAULT_KV_DTYPE, KV_DTYPES
from wavepp.runtime.kvcache.state_snapshots import DEFAULT_SNAPSHOT_INTERVAL


def register(sub: Any) -> dict[str, Handler]:
    b = sub.add_parser("bench", help="run a workload under policies and concurrencies, side by side")
    b.add_argument("--engine", default="sim", choices=["sim", "torch"], help="execution engine (default: sim)")
    b.add_argument("--model", default=None, help=f"sim: {sim_models('glm-5.2')}; torch: {torch_models()}")
    b.add_argument("--hardware", default=None, help="sim: hardware profile, h200 or b300 (default b300)")
    b.add_argument("--pp", type=positive_int, default=4, help="pipeline stages (default 4)")
    b.add_argument("--workload", default=None,
                   help="cold, reuse90, mixed, suffix:N, suffix4k, suffix16k, sessions:N, "
                        "docs:N[:suffix=K][:zipf=S] or trace:PATH (default: suffix4k on sim, reuse90 on torch)")
    b.add_argument("--concurrency", type=int_list, default=None,
                   help="closed-loop concurrency, a list (default 8,32,128); trace: the most requests outstanding "
                        "(default: no cap, one run per policy); not with --rate")
    b.add_argument("--on-bad-line", choices=["skip", "fail"], default="fail",
                   help="trace: a malformed line ends the bench before it starts (fail) or is skipped and counted")
    b.add_argument("--trace-speed", type=positive_float, default=1.0,
                   help="trace: replay the arrivals this many times faster")
    b.add_argument("--requests", type=positive_int, default=None, help="requests per run (default: max(512, 4 x c))")
    b.add_argument("--policy", type=name_list, default=["wavepp", "trtllm-pp"], help="policies, e.g. wavepp,trtllm-pp")
    b.add_argument("--seed", type=int, default=0, help="workload seed")
    b.add_argument("--block-size", type=positive_int, default=64, help="tokens per KV block")
    b.add_argument("--prompt-tokens", type=positive_int, default=None, help="typical prompt length (default: model)")
    b.add_argument("--kv-blocks", type=int_list, default=None,
                   help="KV blocks per stage: one value, or one per stage (uneven capacities)")
    b.add_argument("--gpus-per-stage", type=positive_int, default=None, help="sim: default GPUs per node / pp")
    b.add_argument("--kv-memory-mb", type=positive_float, default=None,
                   help="torch: KV pool per stage when no --kv-blocks")
    b.add_argument("--cost-model", choices=["auto", "table", "analytic", "fitted"], default="auto",
                   help="sim: measured kernel tables (--perf-dir), roofline from profiles, or fitted from a "
                        "calibration (--cost-profile); auto (default): table where the tables cover the model "
                        "and hardware, else analytic")
    b.add_argument("--perf-dir", default=None,
                   help=f"sim: kernel tables folder (default ${PERF_DIR_ENV} or ../shared/data/perf beside the repo)")
    b.add_argument("--cost-profile", default=None, help="sim: a profile written by `wavepp calibrate`")
    b.add_argument("--sim-profile", default=None,
                   help="torch: this model's `wavepp calibrate` profile: the sim calibrated with it also runs, its "
                        "throughput error reported, and a what-if replays the run with it (the autopilot's search, "
                        "Preview of a saved run)")
    b.add_argument("--max-wave-tokens", type=positive_int, default=None, help="MPU's M")
    b.add_argument("--min-wave-tokens", type=positive_int, default=None, help="MPU's b_min")
    b.add_argument("--ring", type=positive_int, default=None, help="waves in flight R (default 2P, baselines P)")
    b.add_argument("--static-chunk-tokens", type=positive_int, default=None, metavar="TOKENS",
                   help="the TensorRT-LLM presets' tokens per wave (max_num_tokens, default 8192); trtllm-pp-default "
                        "refuses a longer prompt")
    b.add_argument("--store", default="memory",
                   help="memory (default) or redis://host:port/db[?cluster=name]: index, plans, knobs, span stream")
    b.add_argument("--reset-store", action="store_true",
                   help="also clear the store's knobs, their history, the span stream and the run descriptions "
                        "(default: kept)")
    b.add_argument("--realtime", action="store_true", help="sim only: run on the wall clock instead of virtual time")
    b.add_argument("--time-scale", type=positive_float, default=None,
                   help="with --realtime: multiply modelled step times (default 1)")
    b.add_argument("--store-deadline", type=positive_float, default=30.0, metavar="SECONDS",
                   help="real time: a store unreachable this long ends the bench (default 30)")
    b.add_argument("--json", dest="json_path", type=output_file, default=None, help="write {\"runs\": [...]} here")
    b.add_argument("--trace", type=output_file, default=None,
                   help="write Chrome trace-event JSON here (one lane per stage)")
    b.add_argument("--save-run", type=output_file, default=None,
                   help="save spans, figures, knobs and status of every run (.gz ok)")
    b.add_argument("--kv-dtype", choices=list(KV_DTYPES), default=None,
                   help=f"sim: the KV cache's dtype (default {DEFAULT_KV_DTYPE}, TensorRT-LLM's for these FP8 "
                        "checkpoints; fp8 halves the bytes per cached token, so a pool holds twice the tokens)")
    b.add_argument("--snapshot-interval", type=positive_int, default=None, metavar="TOKENS",
                   help=f"hybrid models (kimi-k3): the snapshot_interval knob - keep a recurrent-state snapshot every "
                        f"this many tokens of a computed prompt, where a later request may resume (default "
                        f"{DEFAULT_SNAPSHOT_INTERVAL})")
    b.add_argument("--host-scale", type=float, default=None,
                   help="sim: multiply the lockstep host work of a conventional PP loop (sensitivity)")
    b.add_argument("--stall-timeout", type=positive_float, default=60.0,
                   help="end a run that makes no progress this many seconds (of its clock) while work waits")
    b.add_argument("--check-invariants", action="store_true",
                   help="check the runtime's invariants (runtime/guards/invariants.py) after every wave and when a run "
                        "drained; a violation ends the run with its name (slow: for tests and diagnosis)")
    b.add_argument("--quiet", action="store_true", help="no progress bar")
    b.add_argument("--launcher", choices=LAUNCHERS, default=None, help=LAUNCHER_HELP)
    bench_telemetry.add_flags(b)
    b.add_argument("--url", default=None,
                   help="drive a running `wavepp serve` at this URL over HTTP instead of an in-process engine")
    b.add_argument("--rate", type=positive_float, default=None,
                   help="with --url: open loop, Poisson arrivals at this many requests/s (default: closed loop)")
    autopilot_args.add_flags(b, "30 s")
    return {"bench": cmd_bench}


def defaults() -> argparse.Namespace:
    """Every bench flag at its default (``bench --url`` refuses the ones given that it cannot honour)."""
    parser = Parser(prog="wavepp")
    register(parser.add_subparsers(dest="command", parser_class=Parser))
    return parser.parse_args(["bench"])


#: bench flags that mean something on one engine only: given for the other, they are refused
SIM_ONLY = {"hardware": "--hardware", "gpus_per_stage": "--gpus-per-stage", "cost_profile": "--cost-profile",
            "perf_dir": "--perf-dir", "host_scale": "--host-scale", "time_scale": "--time-scale",
            "kv_dtype": "--kv-dtype"}
TORCH_ONLY = {"kv_memory_mb": "--kv-memory-mb", "launcher": "--launcher", "sim_profile": "--sim-profile"}


def refuse_flags_of_other_engine(args: argparse.Namespace) -> None:
    """A flag that would do nothing on the chosen engine is an error, not silently ignored."""
    other = SIM_ONLY if args.engine == "torch" else TORCH_ONLY
    given = [flag for dest, flag in other.items() if getattr(args, dest) is not None]
    if args.engine == "torch" and args.realtime:
        given.append("--realtime")
    if args.engine == "torch" and args.cost_model != "auto":
        given.append("--cost-model")
    if given:
        what = "the torch engine runs real compute" if args.engine == "torch" else "the sim has no torch stages"
        raise ValueError(f"{', '.join(given)}: only for --engine {'sim' if args.engine == 'torch' else 'torch'} "
                         f"({what})")


def knob_flags(args: argparse.Namespace) -> dict[str, Any]:
    """The knobs given as flags (the others: the engine's defaults, or the knobs a store kept)."""
    return {k: v for k, v in (("max_wave_tokens", args.max_wave_tokens), ("min_wave_tokens", args.min_wave_tokens),
                              ("ring", args.ring), ("snapshot_interval", args.snapshot_interval),
                              ("static_chunk_tokens", args.static_chunk_tokens)) if v is not None}


def cmd_bench(args: argparse.Namespace) -> int:
    if args.url is not None:
        return cmd_bench_url(args, defaults())
    if args.rate is not None:
        raise UsageError("--rate: only with --url (an in-process bench is closed loop, or a trace's own arrivals)")
    from wavepp.runtime.bench.runs import run_concurrencies
    from wavepp.runtime.control.knobs import KnobError, check_block_size, field_problems
    from wavepp.runtime.policies import get_policy
    from wavepp.runtime.sources import prompt_worker
    from wavepp.runtime.sources.trace_file import load_trace
    from wavepp.runtime.sources.workloads import fit_prompt_tokens, parse_workload
    from wavepp.store.base import StoreError

    engine: Any = None
    try:
        try:
            if args.time_scale is not None and not args.realtime:
                raise ValueError("--time-scale stretches the wall clock of a real-time run: it needs --realtime")
            spec = parse_workload(args.workload or ("reuse90" if args.engine == "torch" else "suffix4k"))
            args.concurrency = run_concurrencies(args.concurrency, spec)
            if spec.kind == "trace":
                spec = dataclasses.replace(spec, on_bad_line=args.on_bad_line, speed=args.trace_speed)
                trace = load_trace(spec.path, spec.on_bad_line, args.requests)    # every line checked up front
                if trace.skipped:
                    print(f"wavepp: warning: skipped {trace.skipped} malformed line(s) of the trace, "
                          f"first: {trace.first_skip}", file=sys.stderr)
            for p in args.policy:
                get_policy(p)
            refuse_flags_of_other_engine(args)
            changes = knob_flags(args)
            if found := field_problems(changes, args.block_size):     # each on its own, before an engine loads
                raise KnobError(found)
            bench_telemetry.apply(args)
            pilot = autopilot_args.settings(args, 30.0)
            if spec.kind == "trace" and args.engine == "sim" and not args.realtime:
                prompt_worker.prestart(spec.path)   # the first run's prompt helper starts while the engine loads
            # Imported after the checks above: the sim's cost models load torch (~1 s), which a bad
            # --policy or --workload need not wait for.
            from wavepp.runtime.engines.config import SimConfig
            from wavepp.runtime.engines.sim.engine import SimEngine
            if args.engine == "torch":
                from wavepp.runtime.engines.config import DEFAULT_KV_MB, TorchConfig
                from wavepp.runtime.engines.torch.engine import TorchEngine
                args.model = args.model or "tiny-llama"
                engine = TorchEngine(TorchConfig(args.model, args.pp, args.block_size, args.kv_blocks,
                                                 args.kv_memory_mb or DEFAULT_KV_MB, args.seed, store_url=args.store,
                                                 launcher=args.launcher or "threads",
                                                 sim_profile=str(Path(args.sim_profile).resolve()) if args.sim_profile
                                                 else None))
                args.hardware = engine.device.type       # a torch run reports its device, no hardware profile
            else:
                if (args.cost_model == "fitted") != (args.cost_profile is not None):
                    raise ValueError("--cost-model fitted and --cost-profile FILE go together")
                args.model = args.model or ("tiny-llama" if args.cost_profile else "glm-5.2")
                args.hardware = args.hardware or "b300"
                engine = SimEngine(SimConfig(
                    args.model, args.hardware, args.pp, args.block_size, args.kv_blocks, args.gpus_per_stage,
                    store_url=args.store, clock="wall" if args.realtime else "virtual",
                    time_scale=args.time_scale or 1.0, cost_profile=args.cost_profile,
                    cost_model="auto" if args.cost_profile else args.cost_model, perf_dir=args.perf_dir,
                    host_work_scale=1.0 if args.host_scale is None else args.host_scale,
                    kv_dtype=args.kv_dtype or DEFAULT_KV_DTYPE))
            sim = None
            if args.sim_profile:
                if args.engine != "torch":
                    raise ValueError("--sim-profile compares the torch engine with its calibrated sim: "
                                     "use --engine torch")
                sim = SimEngine(SimConfig(args.model, args.hardware, args.pp, args.block_size, args.kv_blocks,
                                          cost_profile=args.sim_profile))
            if args.engine == "torch":          # a TP/EP layout is the sim's alone: refused before any run
                from wavepp.runtime.bench.runs import laid_out
                for p in args.policy:
                    laid_out(engine, get_policy(p).topology)
            knobs = check_block_size(engine.default_knobs().replace(**changes), args.block_size)
            if args.prompt_tokens is not None and args.prompt_tokens < 2 * args.block_size:
                raise ValueError(f"--prompt-tokens must be at least 2 blocks ({2 * args.block_size})")
            if spec.kind != "trace":             # a trace's prompts are its own (longer ones fail at arrival)
                args.prompt_tokens = fit_prompt_tokens(spec, args.prompt_tokens, engine.default_prompt_tokens(),
                                                       engine.max_context, args.block_size)
        except (ValueError, KnobError, StoreError) as exc:
            raise UsageError(str(exc)) from None
        return _bench(args, spec, engine, sim, knobs, pilot)
    except KeyboardInterrupt:
        if engine is not None:
            engine.close(orderly=False)
        raise
    finally:
        if engine is not None:
            engine.close()


def _bench(args: argparse.Namespace, spec: Any, engine: Any, sim: Any, knobs: Any, pilot: Any) -> int:
    """Run every (concurrency, policy) pair; the outputs of the runs that finished are written even
    when a later one fails, then the failure is raised."""
    from wavepp.runtime.bench.progress import BenchProgress, print_table
    from wavepp.runtime.bench.runs import BenchConfig, RunRecord, iter_bench, prepare_store, run_bench, starting_knobs
    from wavepp.runtime.figures.report import fmt
    from wavepp.runtime.mechanisms.stage_admission import SOURCE_STOPS
    from wavepp.store.base import StoreError
    requests = args.requests if spec.kind == "trace" else args.requests or max(512, 4 * max(args.concurrency))
    cfg = BenchConfig(spec, args.concurrency, args.policy, requests, args.seed, args.prompt_tokens, knobs,
                      args.model, args.hardware, args.stall_timeout, args.store_deadline, args.telemetry,
                      check_invariants=args.check_invariants,
                      keep_spans=bool(args.save_run or args.trace))   # figures alone: folded in as spans end
    if pilot is not None:
        from wavepp.runtime.autopilot.runner import companion
        cfg.companions = [companion(pilot)]
    if args.engine == "sim":              # --quiet hides the progress bar only
        print(f"sim cost model: {engine.cost_model_name}")
    try:
        prepared = prepare_store(engine.store_url, args.reset_store)   # unreachable, not Redis: before any run
    except StoreError as exc:
        raise UsageError(str(exc)) from None
    if prepared is not None and prepared.knobs is not None:
        from wavepp.runtime.control.knobs import Deployment
        cfg.knobs, started = starting_knobs(prepared.knobs, knob_flags(args), knobs,
                                            Deployment(args.block_size, engine.pp))
        print(f"{prepared.line}; {started}")
    elif prepared is not None:
        print(prepared.line)
    records: list[RunRecord] = []
    failure: BaseException | None = None
    with BenchProgress(disabled=args.quiet) as progress:
        try:
            for record in iter_bench(engine, cfg, progress.update):
                records.append(record)
        except StoreError as exc:          # the store went away mid-run and did not come back in time
            failure = RunFailed(f"store: {exc}")
        except (Exception, KeyboardInterrupt) as exc:
            failure = exc
    for r in records:     # the JSON says the sim's cost model as `sim cost model:` does
        if args.engine == "sim":
            r.meta["sim_cost_model"] = engine.cost_model_name
    if records:
        print_table([r.figures for r in records])
        print_pressure(records)
        print_autopilot(records)
        bench_telemetry.print_cost(records)
    if sim is not None and failure is None:
        for r, s_ in zip(records, run_bench(sim, cfg), strict=True):
            measured, modelled = r.figures.input_tokens_per_s, s_.figures.input_tokens_per_s
            err = modelled / measured - 1 if measured and modelled is not None else None
            r.meta["sim_input_tokens_per_s"] = modelled
            r.meta["sim_throughput_error"] = err
            print(f"calibrated sim vs torch, {r.label}: {fmt(modelled, ',.0f')} vs {fmt(measured, ',.0f')} "
                  f"input tok/s ({fmt(err, '+.1%')}); efficiency {fmt(s_.figures.pipeline_efficiency, '.3f')} "
                  f"vs {fmt(r.figures.pipeline_efficiency, '.3f')}")
    _write_outputs(args, records)
    if failure is not None:
        raise failure
    stuck = [r for r in records if r.figures.stalled and not r.figures.stalled.endswith(SOURCE_STOPS)]
    if stuck:         # the deadlock guard: a failure of the run (reported, every other run went on)
        raise RunFailed(f"{stuck[0].label}: {stuck[0].figures.stalled}" + (f" (and {len(stuck) - 1} more)"
                                                                            if len(stuck) > 1 else ""))
    failed = sum(r.figures.failed for r in records)
    if not failed:
        return 0
    first = next(iter(next(r for r in records if r.loop.failures).loop.failures.values()))
    dead = [r.label for r in records if r.figures.completed == 0]
    if dead:
        raise RunFailed(f"every request failed in {', '.join(dead)} ({failed} in all), e.g.: {first}")
    print(f"warning: {failed} request(s) failed, e.g.: {first}", file=sys.stderr)
    return 0


def print_pressure(records: Sequence[Any]) -> None:
    """The workload's working set beside each stage's pool (once per distinct line): how much must
    be evicted for every reuse to hold."""
    seen = set()
    for r in records:
        ws, pools = r.meta.get("working_set_tokens") or 0, [n * r.meta["block_size"] for n in r.meta["capacities"]]
        if not ws or not pools:
            continue
        line = (f"working set {ws:,} tokens of shared prefixes = {ws / min(pools):.3g}x the smallest stage's pool "
                f"(pools {', '.join(f'{p:,}' for p in pools)} tokens) [{r.label}]")
        key = line.rsplit(" [", 1)[0]
        if key not in seen:
            seen.add(key)
            print(line)


def print_autopilot(records: Sequence[Any]) -> None:
    """Per run with the autopilot: its windows, applies, rollbacks and what it left the knobs at."""
    for r in records:
        made = r.meta.get("autopilot")
        if made is None:
            continue
        from wavepp.telemetry import names as N
        actions = [d[N.AUTOPILOT_ACTION] for d in made]
        changes = [c for _, c in r.loop.knob_changes]
        print(f"autopilot [{r.label}]: {len(made)} windows, {actions.count('apply')} applied, "
              f"{actions.count('advise')} advised, {actions.count('rollback')} rolled back; knob changes: "
              f"{', '.join(json.dumps(c) for c in changes) or 'none'}")


def _write_outputs(args: argparse.Namespace, records: Sequence[Any]) -> None:
    """``--json``, ``--save-run`` and ``--trace`` of the runs that finished."""
    if not records:
        return
    from wavepp.runtime.runs.runfile import save_runs
    from wavepp.telemetry.chrome_trace import write_trace
    runs = [{**r.figures.as_dict(), **{k: v for k, v in r.meta.items() if k.startswith(("sim_", "spans"))},
             "working_set_tokens": r.meta.get("working_set_tokens"),
             "capacity_tokens": [n * r.meta["block_size"] for n in r.meta["capacities"]],
             "telemetry": r.meta["telemetry"],
             "knobs": r.meta["knobs"], "knob_changes": [c for _, c in r.loop.knob_changes],
             **({"autopilot": r.meta["autopilot"]} if "autopilot" in r.meta else {})} for r in records]
    # Each output on its own: one that cannot be written (a full disk) does not cost the others.
    write_outputs([
        (args.json_path, lambda p: Path(p).write_text(json.dumps({"runs": runs}, indent=1)), f"wrote {args.json_path}"),
        (args.save_run, lambda p: save_runs(p, [r.saved() for r in records]),
         f"wrote {args.save_run} (wavepp dashboard --run {args.save_run})"),
        (args.trace, lambda p: write_trace(p, ((r.label, r.encoded, args.pp) for r in records)),
         f"wrote {args.trace} (open in https://ui.perfetto.dev)")])
