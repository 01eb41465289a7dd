"""The autopilot's predictor hands Suggest the replay a setting can be judged on."""

from __future__ import annotations

from typing import Any

import pytest

import wavepp.runtime.autopilot.predict as predict
from wavepp.runtime.autopilot.settings import AutopilotSettings
from wavepp.runtime.autopilot.window import WindowFigures, WorkloadStats
from wavepp.runtime.control.knobs import Knobs
from wavepp.telemetry import names as N


def spans(cap: int, n: int = 40, gap_s: float = 0.0) -> list[dict[str, Any]]:
    """``n`` requests of 1 s each; with ``cap`` outstanding at most, each arrives as one completes
    (``gap_s`` = 0) or at its own pace, never reaching the cap (``gap_s`` = 1)."""
    out = []
    for i in range(n):
        t0 = (i // cap) * 1.0 if not gap_s else i * gap_s
        out.append({"n": N.REQUEST, "t0": int(t0 * 1e9), "t1": int((t0 + 1.0) * 1e9),
                    "a": {N.REQUEST_ID: f"t{i:06d}", N.GEN_AI_INPUT_TOKENS: 4096, N.REUSABLE_TOKENS: 0}})
    return out


@pytest.mark.parametrize(("gap_s", "open_loop"), [(0.0, False), (1.0, True)])
def test_a_trace_whose_cap_bound_is_replayed_as_the_closed_loop_it_was(monkeypatch: pytest.MonkeyPatch,
                                                                       gap_s: float, open_loop: bool) -> None:
    seen: list[Any] = []

    def fake_suggest(replay: Any, *args: Any, **kwargs: Any) -> Any:
        seen.append(replay)
        raise predict.WhatIfError("stop here")
    monkeypatch.setattr(predict, "suggest", fake_suggest)
    meta = {"concurrency": 4, "workload": "trace:phased.jsonl", "engine": "sim", "model": "llama-3-8b",
            "hardware": "h200", "pp": 4, "block_size": 64, "capacities": [1000] * 4}
    held = spans(4, gap_s=gap_s)
    window = WindowFigures(0, 0, 50 * 10**9, 1.0, 0.5, None, None, 40, 0, WorkloadStats(40, 4096.0, 0.0, 1.0))
    search = predict.suggest_predictor(meta, lambda: held)(window, Knobs(), AutopilotSettings(mode="on"))
    assert search.current_tps == 0 and "stop here" in search.note
    assert seen[0].open_loop is open_loop and seen[0].concurrency == 4


def test_candidates_are_weighed_against_the_current_knobs_own_replay(monkeypatch: pytest.MonkeyPatch) -> None:
    """A real-time run's Suggestion anchors its current setting on the run (here 100 observed where the
    replay gave 80): a candidate replayed at 88 is +10 % over the current knobs' own replay, not -12 %
    against the anchored figure - and a candidate equal to the replay is no gain at all."""
    from types import SimpleNamespace as NS

    from wavepp.runtime.whatif.predict import Prediction

    def tps(x: float) -> Any:
        return NS(input_tokens_per_s=x)
    current = Knobs().as_dict()
    tried = [Prediction(current, tps(80.0), 1.0), Prediction(Knobs(ring=8).as_dict(), tps(88.0), 1.0),
             Prediction(Knobs(ring=2).as_dict(), tps(80.0), 1.0)]
    found = NS(current=Prediction(current, tps(100.0), 1.0, raw=tps(80.0)), tried=tried, planned=3,
               error=NS(noise=0.25), replay_note="")
    monkeypatch.setattr(predict, "suggest", lambda *a, **k: found)
    meta = {"concurrency": 4, "workload": "reuse90", "engine": "sim", "model": "llama-3-8b", "hardware": "h200",
            "pp": 4, "block_size": 64, "capacities": [1000] * 4}
    window = WindowFigures(0, 0, 50 * 10**9, 1.0, 0.5, None, None, 40, 0, WorkloadStats(40, 4096.0, 0.0, 1.0))
    search = predict.suggest_predictor(meta, lambda: spans(4, gap_s=1.0))(window, Knobs(), AutopilotSettings(mode="on"))
    assert search.current_tps == 80.0 and search.error == 0.25
    assert [(c.knobs.ring, c.predicted_tps / search.current_tps - 1) for c in search.candidates] == \
        [(8, pytest.approx(0.1)), (2, 0.0)]


def test_beside_a_real_time_run_the_search_runs_in_a_child_of_the_lowest_priority() -> None:
    """The child's search is the same search (a virtual-time sim replay is deterministic: the same figures
    as in this process), run at niceness 19; a child that dies is one line, and the next search starts a
    new one."""
    import os

    from tests.test_whatif import KNOBS, replay, sim_run
    from wavepp.runtime.autopilot.settings import from_dict, parse_bounds
    from wavepp.runtime.whatif.preview import sim_spec

    run = sim_run(KNOBS.replace(ring=1), requests=48)
    settings = from_dict({"mode": "on", "bounds": parse_bounds("ring=1:16")})
    current = KNOBS.replace(ring=1)
    here = predict.search_here(replay(run), sim_spec(run.meta), current, settings)
    child = predict.SearchProcess()
    try:
        there = child(replay(run), sim_spec(run.meta), current, settings)
        assert [p.figures.input_tokens_per_s for p in there.tried] == [p.figures.input_tokens_per_s for p in here.tried]
        assert len(there.tried) == 4 and child.call(os.nice, 0) == 19
        with pytest.raises(predict.WhatIfError, match="the search process died"):
            child.call(os._exit, 1)
        assert child.call(os.nice, 0) == 19
    finally:
        child.close()


def test_a_search_child_outlives_no_runtime_killed_outright(tmp_path: Any) -> None:
    """A runtime killed with SIGKILL never shuts its search pool down: its child, waiting for work that will
    not come, exits by itself within a few polls of its parent's death (before, it waited forever: every
    `wavepp serve --autopilot` the test fixtures kill left one behind)."""
    import os
    import subprocess
    import sys
    import time

    out = tmp_path / "child.pid"
    script = ("import os, signal, sys\n"
              "from wavepp.runtime.autopilot.predict import SearchProcess\n"
              "child = SearchProcess()\n"
              "open(sys.argv[1], 'w').write(str(child.call(os.getpid)))\n"
              "os.kill(os.getpid(), signal.SIGKILL)\n")
    # No pipes: a child that outlived the runtime would hold them open and hang the wait.
    proc = subprocess.run([sys.executable, "-c", script, str(out)], stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL, timeout=120)
    assert proc.returncode == -9
    pid = int(out.read_text())

    def alive() -> bool:
        try:
            with open(f"/proc/{pid}/stat") as f:           # reaped by init soon after it exits: not a zombie
                return f.read().split(") ", 1)[1][0] != "Z"
        except FileNotFoundError:
            return False

    deadline = time.monotonic() + 10 * predict.PARENT_POLL_S + 10
    while alive() and time.monotonic() < deadline:
        time.sleep(0.2)
    try:
        assert not alive(), f"the search child {pid} outlived the runtime that spawned it"
    finally:
        if alive():
            os.kill(pid, 9)
