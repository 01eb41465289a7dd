"""The autopilot's benchmark (``make bench-autopilot``): a phased trace (runtime/sources/phased_trace.py: shared
system prompts, then long documents, then long cold prompts, the arrival rate stepping) on the simulated
GLM-5.2 / B300, PP4, in virtual time, at most ``--concurrency`` requests outstanding:

* the autopilot on, from the default knobs;
* the default knobs, fixed;
* every setting of Suggest's grid around the default knobs, fixed - per phase, the best of them is the
  setting hindsight would have picked for that phase.

Per phase: input tok/s and prefill (TTFT) p99 of each; the autopilot's decisions, and the windows from a
phase's start to its first decision on the new workload (time to converge).

    python scripts/bench_autopilot.py --json out/bench-autopilot.json --markdown out/bench-autopilot.md
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from wavepp.runtime.autopilot.runner import companion
from wavepp.runtime.autopilot.settings import AutopilotSettings
from wavepp.runtime.bench.runs import BenchConfig, RunRecord, run_one
from wavepp.runtime.control.knobs import Knobs
from wavepp.runtime.engines.config import SimConfig
from wavepp.runtime.engines.sim.engine import SimEngine
from wavepp.runtime.sources.phased_trace import DEFAULT_PHASES, PhaseFigures, phase_figures, write
from wavepp.runtime.sources.workloads import parse_workload
from wavepp.runtime.whatif.suggest import suggest_grid
from wavepp.telemetry import names as N

MODEL, HARDWARE, PP, BLOCK = "glm-5.2", "b300", 4, 64


def run(trace: str, knobs: Knobs, concurrency: int, pilot: AutopilotSettings | None) -> RunRecord:
    engine = SimEngine(SimConfig(MODEL, HARDWARE, PP, BLOCK))
    cfg = BenchConfig(parse_workload(f"trace:{trace}"), [concurrency], [knobs.policy], None, knobs=knobs,
                      companions=[companion(pilot)] if pilot is not None else [])
    return run_one(engine, cfg, knobs.policy, concurrency)


def label(knobs: Knobs, default: Knobs) -> str:
    changed = {k: v for k, v in knobs.as_dict().items() if default.as_dict()[k] != v}
    return "default" if not changed else ", ".join(f"{k}={v}" for k, v in changed.items())


def fmt(x: float | None, spec: str) -> str:
    return "-" if x is None else format(x, spec)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--window", type=float, default=20.0, help="the autopilot's window, virtual seconds (20)")
    ap.add_argument("--concurrency", type=int, default=32, help="most requests outstanding (32)")
    ap.add_argument("--trace", default="out/phased-trace.jsonl", help="where the phased trace is written")
    ap.add_argument("--start", default="", metavar="KNOB=VALUE,...",
                    help="the knobs the deployment starts with, over the engine's defaults (default: those)")
    ap.add_argument("--json", default="out/bench-autopilot.json")
    ap.add_argument("--markdown", default="out/bench-autopilot.md")
    args = ap.parse_args()
    Path(args.trace).parent.mkdir(parents=True, exist_ok=True)
    phases = write(args.trace, DEFAULT_PHASES, max_context=SimEngine(SimConfig(MODEL, HARDWARE, PP, BLOCK)).max_context)
    default = SimEngine(SimConfig(MODEL, HARDWARE, PP, BLOCK)).default_knobs()
    if args.start:
        default = default.replace(**{k: int(v) for k, _, v in (p.partition("=") for p in args.start.split(","))})
    started = time.monotonic()
    pilot = run(args.trace, default, args.concurrency,
                AutopilotSettings(mode="on", window_s=args.window, search_s=600))
    print(f"autopilot run: {time.monotonic() - started:.0f} s", file=sys.stderr)
    fixed: dict[str, list[PhaseFigures]] = {}
    for knobs in suggest_grid(default, PP, BLOCK):
        fixed[label(knobs, default)] = phase_figures(run(args.trace, knobs, args.concurrency, None).encoded, phases)
    ours = phase_figures(pilot.encoded, phases)
    decisions = pilot.meta["autopilot"]

    starts = phase_starts(pilot.encoded, phases)
    lines = [f"starting knobs: {label(default, SimEngine(SimConfig(MODEL, HARDWARE, PP, BLOCK)).default_knobs())}", "",
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
