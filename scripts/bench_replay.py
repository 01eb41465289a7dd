"""What a replay costs: the wall time a request and the peak memory of ``wavepp bench`` replaying file traces on
the sim's virtual clock, one process a run (start-up included), per policy; optionally beside another checkout,
alternated run by run so both see the same machine.

    .venv/bin/python scripts/bench_replay.py [--traces ../shared/data/traces/*.jsonl] \\
        [--policies wavepp,trtllm-pp,vllm-pp,sglang-pp] [--rounds 3] [--before ../other-checkout]

Prints a Markdown table: each trace and policy, the median wall time and its ms a request (the range over the
rounds beside it), the largest peak RSS (the bench process's, or its helper's if larger: the kernel reports the
larger of a process and the children it waited for), and the run's figures' fingerprint - a checkout beside
this one must replay the same figures or the comparison is of two different runs. Then the sim loop's
cost of a timer (``scripts/bench_virtual_loop.py``'s asyncio row), which figures of different days compare
through. The issue's target: at most 3 ms a request per policy on the development machine.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TRACES = REPO.parent / "shared" / "data" / "traces"
POLICIES = "wavepp,trtllm-pp,vllm-pp,sglang-pp"
# The development machine's setting of the figures in the closing notes (DESIGN.md: GLM-5.2 on B300, PP4).
BENCH_ARGS = ["--engine", "sim", "--model", "glm-5.2", "--hardware", "b300", "--pp", "4", "--quiet"]
VOLATILE = ("wall", "started", "label", "run_id")     # what differs between two runs of the same replay


@dataclass
class Cell:
    """One trace, policy and checkout: every round's wall time and peak RSS, and its figures' fingerprint."""

    walls: list[float] = field(default_factory=list)
    peaks_kb: list[int] = field(default_factory=list)
    requests: int = 0
    fingerprints: set[str] = field(default_factory=set)


def fingerprint(runs: list[dict[str, object]]) -> str:
    """The figures of a bench's JSON, without what differs between two runs of one replay (wall time, ids)."""
    def keep(x: object) -> object:
        if isinstance(x, dict):
            return {k: keep(v) for k, v in x.items() if not any(w in k for w in VOLATILE)}
        if isinstance(x, list):
            return [keep(v) for v in x]
        return x
    return hashlib.sha256(json.dumps(keep(runs), sort_keys=True).encode()).hexdigest()[:12]


def run_once(checkout: Path, trace: Path, policy: str, requests: int | None) -> tuple[float, int, int, str]:
    """One bench in its own process: (wall seconds, peak RSS in KB, requests replayed, figures' fingerprint)."""
    wavepp = checkout / ".venv" / "bin" / "wavepp"
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "bench.json"
        cmd = [str(wavepp), "bench", *BENCH_ARGS, "--workload", f"trace:{trace}", "--policy", policy,
               "--json", str(out)] + (["--requests", str(requests)] if requests else [])
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=checkout, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        assert proc.stderr is not None
        err = proc.stderr.read()
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode != 0:
            raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}): {err.decode(errors='replace')[-400:]}")
        runs = json.loads(out.read_text())["runs"]
    return wall, usage.ru_maxrss, sum(int(r["requests"]) for r in runs), fingerprint(runs)


def timer_cost_us(checkout: Path, sleeps: int) -> float:
    """``scripts/bench_virtual_loop.py``'s asyncio row on this checkout's interpreter (us a sleep)."""
    proc = subprocess.run([str(checkout / ".venv" / "bin" / "python"), str(REPO / "scripts" / "bench_virtual_loop.py"),
                           "--sleeps", str(sleeps)], capture_output=True, text=True, check=True, cwd=checkout)
    row = next(line for line in proc.stdout.splitlines() if line.startswith("asyncio"))
    return float(row.split()[-4])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--traces", nargs="+", type=Path, default=sorted(TRACES.glob("*.jsonl")))
    parser.add_argument("--policies", default=POLICIES)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--requests", type=int, default=None, help="replay only a trace's first N rows")
    parser.add_argument("--before", type=Path, default=None, help="another checkout (with its .venv) to compare")
    parser.add_argument("--timer-sleeps", type=int, default=4000, help="bench_virtual_loop.py's --sleeps")
    args = parser.parse_args(argv)
    if not args.traces:
        parser.error(f"no traces given and none in {TRACES}")
    checkouts = {"this": REPO} | ({"before": args.before.resolve()} if args.before else {})
    cells: dict[tuple[str, str, str], Cell] = {}
    timers = {name: timer_cost_us(path, args.timer_sleeps) for name, path in checkouts.items()}
    for _ in range(args.rounds):
        for trace in args.traces:
            for policy in args.policies.split(","):
                for name, path in checkouts.items():
                    wall, peak, requests, figures = run_once(path, trace.resolve(), policy, args.requests)
                    cell = cells.setdefault((trace.name, policy, name), Cell())
                    cell.walls.append(wall)
                    cell.peaks_kb.append(peak)
                    cell.requests = requests
                    cell.fingerprints.add(figures)
    for name, path in checkouts.items():       # again after: how much the machine moved meanwhile
        timers[name] = min(timers[name], timer_cost_us(path, args.timer_sleeps))
    print("| trace | policy | checkout | requests | wall s (median) | ms a request (range) | peak RSS MB | figures |")
    print("|---|---|---|---|---|---|---|---|")
    for (trace_name, policy, name), cell in cells.items():
        med = statistics.median(cell.walls)
        per = [1e3 * w / cell.requests for w in cell.walls]
        figures = ",".join(sorted(cell.fingerprints))
        print(f"| {trace_name} | {policy} | {name} | {cell.requests} | {med:.2f} | {1e3 * med / cell.requests:.2f} "
              f"({min(per):.2f}-{max(per):.2f}) | {max(cell.peaks_kb) / 1024:.0f} | {figures} |")
    print()
    for name, us in timers.items():
        print(f"sim loop timer ({name}): {us:.2f} us a sleep (scripts/bench_virtual_loop.py, asyncio's scheduling)")
    if len(checkouts) > 1:
        differ = [(t, p) for t, p, name in cells
                  if name == "this" and cells[(t, p, name)].fingerprints != cells[(t, p, "before")].fingerprints]
        for trace_name, policy in differ:
            print(f"figures differ between the checkouts: {trace_name} {policy}")
        return 1 if differ else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
