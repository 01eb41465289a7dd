"""Recomputation after a late fallback: busy time thrown away, from the spans alone."""

from __future__ import annotations

from typing import Any

import pytest

from wavepp.runtime.figures.recomputation import RecomputeTracker, recomputation_s
from wavepp.telemetry import names as N

MS = 1_000_000


def execute(stage: int, t0: float, t1: float, chunks: list[tuple[str, int, int]]) -> dict[str, Any]:
    return {"n": N.EXECUTE, "t0": int(t0 * MS), "t1": int(t1 * MS), "a": {
        N.STAGE: stage, N.TOKENS: sum(n for _, _, n in chunks), N.REQUEST_IDS: [r for r, _, _ in chunks],
        N.CHUNK_STARTS: [s for _, s, _ in chunks], N.CHUNK_TOKENS: [n for _, _, n in chunks]}}


def request(rid: str, fallbacks: list[float]) -> dict[str, Any]:
    return {"n": N.REQUEST, "t0": 0, "t1": 100 * MS, "a": {N.REQUEST_ID: rid},
            "ev": [[N.EVENT_FALLBACK, int(t * MS), {N.STAGE: 1}] for t in fallbacks]}


def test_chunks_run_before_a_fallback_are_the_recomputation() -> None:
    """Request a falls back at t = 10 ms (stage 1 lacked part of its prefix). Stage 0 had run a's
    chunk at 2-6 ms beside b's equal chunk: half of that step is lost. Its chunk after the fallback
    (12-22 ms) is the recomputation itself, not lost; b never fell back."""
    spans = [request("a", [10]), request("b", []),
             execute(0, 2, 6, [("a", 4096, 2048), ("b", 0, 2048)]),
             execute(0, 12, 22, [("a", 1024, 5120)]),
             execute(1, 12, 13, [("b", 0, 2048)])]
    assert recomputation_s(spans, 2) == [pytest.approx(4e-3 * 0.5), 0.0]


def test_every_attempt_before_the_last_fallback_is_lost() -> None:
    spans = [request("a", [10, 20]),
             execute(0, 1, 3, [("a", 0, 4096)]),      # first attempt
             execute(0, 12, 15, [("a", 0, 4096)]),    # second attempt, abandoned at 20 ms
             execute(0, 30, 34, [("a", 0, 8192)])]    # the attempt that completes
    assert recomputation_s(spans, 1) == [pytest.approx(5e-3)]


def test_no_fallback_no_recomputation() -> None:
    spans = [request("a", []), execute(0, 0, 5, [("a", 0, 4096)])]
    assert recomputation_s(spans, 1) == [0.0]


def test_spans_in_any_order_and_in_pieces_give_the_same_figure() -> None:
    """A live view adds spans as they arrive: the request span may come before or after its chunks."""
    spans = [request("a", [10, 20]), request("b", [5]),
             execute(0, 1, 3, [("a", 0, 4096), ("b", 0, 4096)]),
             execute(1, 12, 15, [("a", 0, 4096)]),
             execute(0, 30, 34, [("a", 0, 8192)])]
    whole = recomputation_s(spans, 2)
    assert whole == [pytest.approx(1e-3 + 1e-3), pytest.approx(3e-3)]
    backwards = recomputation_s(list(reversed(spans)), 2)
    tracker = RecomputeTracker()
    for sp in spans[2:] + spans[:2]:
        tracker.add([sp])
    assert backwards == pytest.approx(whole) and tracker.seconds(2) == pytest.approx(whole)
