"""A live source's span window (dashboard/span_window.py): the newest spans, held encoded, read back equal."""

from __future__ import annotations

import gc

from wavepp.dashboard.span_window import SpanWindow


def span(i: int) -> dict[str, object]:
    return {"n": "wavepp.stage.execute", "t0": i, "t1": i + 5, "a": {"wavepp.stage": i % 4, "ids": [f"r{i}"]},
            "ev": [["wavepp.admitted", i, {"k": 1.5}]]}


def test_it_keeps_the_newest_spans_and_reads_them_back_equal() -> None:
    window = SpanWindow(3)
    window.extend(span(i) for i in range(5))
    spans = window.spans()
    assert len(window) == len(spans) == 3
    assert list(spans) == [span(2), span(3), span(4)]
    assert spans[-1] == span(4) and spans[1:] == [span(3), span(4)]
    window.extend([span(9)])
    assert list(spans) == [span(2), span(3), span(4)]       # a snapshot's copy stays as it was read


def test_what_orjson_does_not_take_round_trips_through_json() -> None:
    odd = {"n": "x", "t0": 2**70, "t1": float("nan"), "a": {}}
    window = SpanWindow(2)
    window.extend([odd])
    back = window.spans()[0]
    assert back["t0"] == 2**70 and back["t1"] != back["t1"]        # the big integer and NaN kept


def test_the_garbage_collector_does_not_walk_the_window() -> None:
    window = SpanWindow(10_000)
    window.extend(span(i) for i in range(10_000))
    assert all(not gc.is_tracked(raw) for raw in window._raw)   # bytes: never walked
