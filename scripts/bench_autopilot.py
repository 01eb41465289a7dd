"""The autopilot's benchmark (``make bench-autopilot``): a phased trace (runtime/sources/phased_trace.py: shared
system prompts, then long documents, then long cold prompts, the arrival rate stepping), at most
``--concurrency`` requests outstanding, on

* ``--engine sim``: the simulated GLM-5.2 / B300, PP4, in virtual time (deterministic), the autopilot free to
  set M, b_min and R over their ranges;
* ``--engine torch``: the torch engine (tiny-llama, PP2, stage threads on this machine's CPU) in real time,
  phases sized to it (:data:`TORCH_PHASES`), the autopilot searching in the simulator calibrated with
  ``--sim-profile`` (``wavepp calibrate``) and bounded by ``--bounds`` (default ``ring=2:8``: a real-time run of
  each setting takes minutes here, so the hindsight grid is the settings those bounds allow).

Runs: the autopilot on, from the starting knobs; the starting knobs fixed; every setting of Suggest's grid
around them that the bounds allow, fixed - per phase, the best of them is the setting hindsight would have
picked for that phase. Per phase: input tok/s and prefill (TTFT) p99 of each; the autopilot's decisions, and
the time from a phase's first arrival to the autopilot's first decision on it (time to converge).

    python scripts/bench_autopilot.py --json out/bench-autopilot.json --markdown out/bench-autopilot.md
    python scripts/bench_autopilot.py --engine torch --sim-profile out/tiny-pp2.json --window 10 ...
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from wavepp.runtime.autopilot.runner import companion
from wavepp.runtime.autopilot.settings import AutopilotSettings, from_dict, parse_bounds
from wavepp.runtime.bench.runs import BenchConfig, RunRecord, run_one
from wavepp.runtime.control.knobs import Knobs
from wavepp.runtime.engines.build import build_engine
from wavepp.runtime.engines.config import EngineConfig, SimConfig, TorchConfig
from wavepp.runtime.sources.phased_trace import DEFAULT_PHASES, Phase, PhaseFigures, phase_figures, write
from wavepp.runtime.sources.workloads import parse_workload
from wavepp.runtime.whatif.suggest import suggest_grid
from wavepp.telemetry import names as N

#: the torch engine's phases: tiny-llama on two CPU cores computes about 1,500 new tokens a second (PP2,
#: 16 outstanding: measured with `wavepp bench --engine torch --model tiny-llama --pp 2 --workload reuse90
#: --prompt-tokens 2048 --concurrency 16`), so each phase is about 30 s of arrivals a little faster than that
#: serves them - the cap binds, as in the sim's phases - in prompts within the model's 4,096-token context.
TORCH_PHASES = (
    Phase("chat", "groups", 600, 20.0, 1024, shared=16),
    Phase("docs", "docs", 240, 8.0, 1024, shared=8, question=256),
    Phase("cold", "cold", 45, 1.5, 1536),
)


@dataclass(frozen=True, slots=True)
class Setup:
    """The engine a benchmark runs on, the phases sized to it and what the autopilot may change there."""
    config: EngineConfig
    phases: Sequence[Phase]
    bounds: str | None             # KNOB=LO:HI,... (None: the autopilot's default, M, b_min and R over their ranges)

    def engine(self) -> Any:
        return build_engine(self.config)


def setup(engine: str, sim_profile: str | None, bounds: str | None) -> Setup:
    if engine == "sim":
        return Setup(SimConfig("glm-5.2", "b300", 4, 64), DEFAULT_PHASES, bounds)
    if not sim_profile:
        raise SystemExit("--engine torch needs --sim-profile FILE (wavepp calibrate --engine torch --model "
                         "tiny-llama --pp 2 --out FILE): the autopilot's search replays with it")
    config = TorchConfig("tiny-llama", 2, 64, sim_profile=str(Path(sim_profile).resolve()))
    return Setup(config, TORCH_PHASES, bounds or "ring=2:8")


def run(s: Setup, trace: str, knobs: Knobs, concurrency: int, pilot: AutopilotSettings | None) -> RunRecord:
    engine = s.engine()
    cfg = BenchConfig(parse_workload(f"trace:{trace}"), [concurrency], [knobs.policy], None, knobs=knobs,
                      companions=[companion(pilot)] if pilot is not None else [])
    try:
        return run_one(engine, cfg, knobs.policy, concurrency)
    finally:
        engine.close()


def hindsight_grid(s: Setup, start: Knobs, allowed: Callable[[Knobs, Knobs], bool]) -> list[Knobs]:
    """Suggest's grid around ``start`` (the settings the autopilot searches), those the bounds allow."""
    return [k for k in suggest_grid(start, s.config.pp, s.config.block_size) if allowed(start, k)]


def label(knobs: Knobs, default: Knobs) -> str:
    changed = {k: v for k, v in knobs.as_dict().items() if default.as_dict()[k] != v}
    return "default" if not changed else ", ".join(f"{k}={v}" for k, v in changed.items())


def fmt(x: float | None, spec: str) -> str:
    return "-" if x is None else format(x, spec)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--engine", choices=["sim", "torch"], default="sim")
    ap.add_argument("--sim-profile", default=None, help="torch: the calibration the autopilot's search replays with")
    ap.add_argument("--bounds", default=None, metavar="KNOB=LO:HI,...",
                    help="what the autopilot may set (sim: M, b_min and R over their ranges; torch: ring=2:8)")
    ap.add_argument("--window", type=float, default=20.0, help="the autopilot's window, seconds of the run (20)")
    ap.add_argument("--search", type=float, default=600.0, help="the wall-clock limit of one search (600)")
    ap.add_argument("--concurrency", type=int, default=32, help="most requests outstanding (32)")
    ap.add_argument("--trace", default="out/phased-trace.jsonl", help="where the phased trace is written")
    ap.add_argument("--start", default="", metavar="KNOB=VALUE,...",
                    help="the knobs the deployment starts with, over the engine's defaults (default: those)")
    ap.add_argument("--json", default="out/bench-autopilot.json")
    ap.add_argument("--markdown", default="out/bench-autopilot.md")
    args = ap.parse_args()
    s = setup(args.engine, args.sim_profile, args.bounds)
    Path(args.trace).parent.mkdir(parents=True, exist_ok=True)
    probe = s.engine()
    phases = write(args.trace, s.phases, max_context=probe.max_context)
    engine_default = default = probe.default_knobs()
    probe.close()
    if args.start:
        default = default.replace(**{k: int(v) for k, _, v in (p.partition("=") for p in args.start.split(","))})
    settings = from_dict({"mode": "on", "window_s": args.window, "search_s": args.search,
                          **({"bounds": parse_bounds(s.bounds)} if s.bounds else {})})
    if args.engine == "torch":
        # Real time: the process's first run pays torch's one-off costs (kernels chosen, allocator pools, pages
        # touched) - the first phase of whichever run came first read 6 % slower. A short run of the first
        # phase's shape pays them before anything is measured (with it: 0.99 in the first phase, no knob changed).
        warm = str(Path(args.trace).with_suffix(".warmup.jsonl"))
        write(warm, [dataclasses.replace(s.phases[0], requests=120)])
        run(s, warm, default, args.concurrency, None)
    started = time.monotonic()
    pilot = run(s, args.trace, default, args.concurrency, settings)
    print(f"autopilot run: {time.monotonic() - started:.0f} s", file=sys.stderr)
    fixed: dict[str, list[PhaseFigures]] = {
        "default": phase_figures(run(s, args.trace, default, args.concurrency, None).encoded, phases)}
    for knobs in hindsight_grid(s, default, settings.allows):
        if label(knobs, default) not in fixed:
            fixed[label(knobs, default)] = phase_figures(run(s, args.trace, knobs, args.concurrency, None).encoded,
                                                         phases)
    ours = phase_figures(pilot.encoded, phases)
    decisions = pilot.meta["autopilot"]

    starts = phase_starts(pilot.encoded, phases)
    lines = [f"{args.engine}: starting knobs {label(default, engine_default)}; bounds "
             f"{', '.join(f'{k}={lo}:{hi}' for k, (lo, hi) in settings.bounds.items())}; {len(fixed)} fixed "
             "settings", "",
             "| phase | default tok/s | default p99 s | autopilot tok/s | autopilot p99 s | hindsight best (setting) "
             "tok/s | its p99 s | autopilot / best | autopilot / default | decided after |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    table = []
    for i, (name, _, _) in enumerate(phases):
        base = fixed["default"][i]
        best_label, best = max(((k, f[i]) for k, f in fixed.items()), key=lambda kv: kv[1].input_tokens_per_s or 0)
        mine = ours[i]
        vs_best = (mine.input_tokens_per_s or 0) / best.input_tokens_per_s if best.input_tokens_per_s else None
        vs_default = (mine.input_tokens_per_s or 0) / base.input_tokens_per_s if base.input_tokens_per_s else None
        took = converged(decisions, starts[i], args.window)
        table.append({"phase": name, "default": _d(base),
                      "autopilot": _d(mine), "best": _d(best), "best_setting": best_label,
                      "autopilot_over_best": vs_best, "autopilot_over_default": vs_default,
                      "decided_after_s": took[0] if took else None, "decision": took[1] if took else None})
        lines.append(f"| {name} | {fmt(base.input_tokens_per_s, ',.0f')} | {fmt(base.prefill_p99_s, '.2f')} | "
                     f"{fmt(mine.input_tokens_per_s, ',.0f')} | {fmt(mine.prefill_p99_s, '.2f')} | "
                     f"{fmt(best.input_tokens_per_s, ',.0f')} ({best_label}) | {fmt(best.prefill_p99_s, '.2f')} | "
                     f"{fmt(vs_best, '.3f')} | {fmt(vs_default, '.3f')} | "
                     f"{f'{took[0]:.0f} s ({took[1]})' if took else '-'} |")
    lines += ["", "| window | input tok/s | action | why | changes |", "|---|---|---|---|---|"]
    for d in decisions:
        w = json.loads(d[N.AUTOPILOT_WINDOW])
        lines.append(f"| {w['index']} | {w['input_tps']:,.0f} | {d[N.AUTOPILOT_ACTION]} | "
                     f"{d[N.AUTOPILOT_WHY].replace('|', '/')[:160]} | {d.get(N.AUTOPILOT_CHOSEN, '')} |")
    actions = [d[N.AUTOPILOT_ACTION] for d in decisions]
    summary = (f"{len(decisions)} windows of {args.window:g} s; applies {actions.count('apply')}, rollbacks "
               f"{actions.count('rollback')}; knob changes {[c for _, c in pilot.loop.knob_changes]}")
    lines += ["", summary]
    text = "\n".join(lines)
    print(text)
    Path(args.markdown).write_text(text + "\n")
    Path(args.json).write_text(json.dumps({"phases": table, "decisions": decisions, "summary": summary,
                                           "fixed": {k: [_d(f) for f in v] for k, v in fixed.items()}}, indent=1))
    return 0


DECIDED = ("apply", "advise", "keep", "rollback")     # a search's or a verdict's outcome on the workload


def phase_starts(spans: list[dict[str, Any]], phases: list[tuple[str, int, int]]) -> list[float]:
    """Each phase's first arrival, seconds after the run's first (a trace request's id names its line)."""
    arrived: dict[int, int] = {}
    for s in spans:
        rid = str(s["a"].get(N.REQUEST_ID, "")) if s["n"] == N.REQUEST else ""
        if rid.startswith("t") and rid[1:].isdigit():
            arrived[int(rid[1:])] = s["t0"]
    origin = min(arrived.values())
    return [(min(t for line, t in arrived.items() if first <= line <= last) - origin) / 1e9
            for _, first, last in phases]


def converged(decisions: list[dict[str, Any]], start_s: float, window_s: float) -> tuple[float, str] | None:
    """Time to converge after a phase starts: from its first arrival to the end of the first window after
    the one it started in whose decision is about the workload (a search's outcome or a verdict), and which."""
    first = int(start_s // window_s) + 1
    for d in decisions:
        index = json.loads(d[N.AUTOPILOT_WINDOW])["index"]
        if index >= first and d[N.AUTOPILOT_ACTION] in DECIDED:
            return (index + 1) * window_s - start_s, d[N.AUTOPILOT_ACTION]
    return None


def _d(f: PhaseFigures) -> dict[str, Any]:
    return {"name": f.name, "completed": f.completed, "input_tokens_per_s": f.input_tokens_per_s,
            "prefill_p99_s": f.prefill_p99_s}


if __name__ == "__main__":
    sys.exit(main())
