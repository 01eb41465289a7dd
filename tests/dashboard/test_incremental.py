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
    # Spans dropped from a bounded window: not an append, so the view is built afresh.
    cache.view(src, dataclasses.replace(snap, spans=spans[5:], received=len(spans) + 5, position=("x", 1)))
    assert cache._entries[snap.run_id].derived is not derived
