"""The autopilot benchmark's own reading of a run (scripts/bench_autopilot.py): when each phase started and
how long the autopilot took to decide on it (time to converge)."""

from __future__ import annotations

import json
from typing import Any

from tests.scripts_loader import load_script
from wavepp.telemetry import names as N

bench = load_script("bench_autopilot.py", "bench_autopilot")


def decision(index: int, action: str) -> dict[str, Any]:
    return {N.AUTOPILOT_WINDOW: json.dumps({"index": index}), N.AUTOPILOT_ACTION: action}


def request(line: int, t0_s: float) -> dict[str, Any]:
    return {"n": N.REQUEST, "t0": int(t0_s * 1e9), "t1": int(t0_s * 1e9) + 1, "a": {N.REQUEST_ID: f"t{line:06d}"}}


def test_phase_starts_are_each_phases_first_arrival_after_the_runs_first() -> None:
    spans = [request(1, 5.0), request(2, 6.0), request(3, 47.5), request(4, 46.0),
             {"n": N.EXECUTE, "t0": 0, "t1": 1, "a": {}}]
    assert bench.phase_starts(spans, [("a", 1, 2), ("b", 3, 4)]) == [0.0, 41.0]


def test_time_to_converge_counts_to_the_end_of_the_first_decision_on_the_new_workload() -> None:
    """A phase starting at 65 s (window 3 of 20 s): window 3 mixes both workloads, the holds of windows 4
    and 5 wait for it to settle, window 6's search keeps the knobs - decided 75 s after the phase began.
    A keep of the window the phase started in is about the workload before it."""
    decisions = [decision(3, "keep"), decision(4, "hold"), decision(5, "hold"), decision(6, "keep"),
                 decision(7, "apply")]
    assert bench.converged(decisions, 65.0, 20.0) == (75.0, "keep")
    assert bench.converged(decisions[:3], 65.0, 20.0) is None
    assert bench.converged([decision(4, "apply")], 65.0, 20.0) == (35.0, "apply")
