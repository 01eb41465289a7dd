"""A live view extends what it derived by the spans that arrived: the tables, the figures and the
idle intervals it ends up with equal those of a rebuild from all the spans."""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from wavepp.dashboard.sources import RunFileSource, Snapshot
from wavepp.dashboard.view import View, ViewCache, make_view


def same(a: View, b: View) -> None:
    for name in ("steps", "requests", "rounds", "plans", "fallbacks"):
        pd.testing.assert_frame_equal(getattr(a.frames, name), getattr(b.frames, name), check_exact=True)
    assert (a.frames.origin_ns, a.frames.num_stages, a.frames.knob_marks) == \
        (b.frames.origin_ns, b.frames.num_stages, b.frames.knob_marks)
    assert a.figures is not None and b.figures is not None
    assert a.figures.as_dict() == b.figures.as_dict()
    assert a.idle == b.idle


def grow(cache: ViewCache, src: RunFileSource, snap: Snapshot, spans: list[dict[str, Any]],
         cuts: list[int]) -> View:
    view = None
    for k in cuts:
        view = cache.view(src, dataclasses.replace(snap, spans=spans[:k], received=k, position=(snap.run_id, k)))
    assert view is not None
    return view


@pytest.mark.parametrize("shuffled", [False, True])
def test_tables_grown_span_by_span_equal_a_rebuild(saved_run: Path, shuffled: bool) -> None:
    """In stream order (spans end in order) and out of it (another stage's spans arriving late)."""
    src = RunFileSource(str(saved_run))
    rng = random.Random(7)
    for run in src.runs():                         # wavepp, and trtllm-pp (admission on the critical path)
        snap = src.snapshot(run.id)
        spans = list(snap.spans)
        if shuffled:                               # late arrivals within windows of 40 spans
            for i in range(0, len(spans), 40):
                part = spans[i:i + 40]
                rng.shuffle(part)
                spans[i:i + 40] = part
        cuts = sorted(rng.sample(range(1, len(spans)), 30)) + [len(spans)]
        cache = ViewCache()
        grown = grow(cache, src, snap, spans, cuts)
        same(grown, make_view(src, dataclasses.replace(snap, spans=spans)))


def test_a_view_that_moved_by_new_spans_extends_its_tables(saved_run: Path) -> None:
    src = RunFileSource(str(saved_run))
    snap = src.snapshot()
    spans = snap.spans
    cache = ViewCache()
    grow(cache, src, snap, spans, [len(spans) // 2])
    derived = cache._entries[snap.run_id].derived
    grow(cache, src, snap, spans, [len(spans) // 2 + 10, len(spans)])
    assert cache._entries[snap.run_id].derived is derived and derived.builder.count == len(spans)
    # Another run under the same id (a restart: fewer spans received): built afresh.
    cache.view(src, dataclasses.replace(snap, spans=spans[:5], received=5, position=("x", 1)))
    assert cache._entries[snap.run_id].derived is not derived


def test_a_bounded_window_that_dropped_spans_is_still_extended(saved_run: Path) -> None:
    """A live source's window drops old spans as new ones arrive: the view takes the new spans (by
    how far the stream moved), its run figures count every span ever received, and its tables hold
    a bounded recent part of the run."""
    src = RunFileSource(str(saved_run))
    snap = src.snapshot()
    spans = snap.spans
    window = len(spans) // 4
    cache = ViewCache(steps_held=200)
    derived = None
    for k in range(window, len(spans) + 1, max(1, window // 7)):
        view = cache.view(src, dataclasses.replace(snap, spans=spans[max(0, k - window):k], received=k,
                                                   position=(snap.run_id, k)))
        derived = derived or cache._entries[snap.run_id].derived
        assert cache._entries[snap.run_id].derived is derived         # never rebuilt
        assert len(view.frames.steps) <= 200
    k = len(spans)
    view = cache.view(src, dataclasses.replace(snap, spans=spans[k - window:], received=k, position=(snap.run_id, -1)))
    whole = make_view(src, snap)
    assert view.figures is not None and whole.figures is not None
    assert view.figures.requests == whole.figures.requests
    assert view.figures.bubble_fraction == pytest.approx(whole.figures.bubble_fraction, abs=1e-12)
    assert view.figures.prefill_latency_p99_s == whole.figures.prefill_latency_p99_s
    # The tables end where the run's do: the newest steps are all there.
    tail = whole.frames.steps.sort_values("t1").tail(50)
    assert set(zip(tail["t0"], tail["t1"], strict=True)) <= set(zip(view.frames.steps["t0"], view.frames.steps["t1"],
                                                                     strict=True))


def test_a_live_view_holds_percentiles_of_the_newest_requests_and_says_so(saved_run: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """A live run may run for days: its view keeps the newest requests' values for the percentiles (the
    tiles say so), while counts and throughput cover the run; a saved run's view stays exact."""
    from wavepp.dashboard import view as view_module
    monkeypatch.setattr(view_module, "LIVE_SAMPLES_HELD", 20)
    src = RunFileSource(str(saved_run))
    snap = src.snapshot()
    whole = make_view(src, snap)
    assert whole.figures is not None and whole.samples_note is None and whole.figures.completed > 20
    cache = ViewCache()
    live = grow(cache, src, dataclasses.replace(snap, live=True), list(snap.spans), [len(snap.spans) // 2,
                                                                                    len(snap.spans)])
    assert live.figures is not None and live.samples_note is not None
    assert f"newest 20 requests (of {whole.figures.completed:,} completed)" in live.samples_note
    assert (live.figures.completed, live.figures.input_tokens_per_s) == \
        (whole.figures.completed, whole.figures.input_tokens_per_s)
    again = cache.view(src, dataclasses.replace(snap, live=True, spans=list(snap.spans), received=len(snap.spans),
                                                position=(snap.run_id, len(snap.spans))))
    assert again.samples_note == live.samples_note and again.decisions == live.decisions
