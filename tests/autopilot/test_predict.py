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
