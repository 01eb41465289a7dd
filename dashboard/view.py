"""One view of a run: the source's snapshot, its tables and its figures (DESIGN §7)."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

from wavepp.dashboard.frames import FrameBuilder, Frames
from wavepp.dashboard.sources import Snapshot, Source
from wavepp.runtime.idle_causes import IdleInterval
from wavepp.runtime.report import FigureAccumulator, RunFigures


@dataclass(slots=True)
class View:
    snap: Snapshot
    frames: Frames
    figures: RunFigures | None
    source: Source
    idle: list[IdleInterval] = field(default_factory=list)   # every stage's idle intervals with their cause

    @property
    def empty(self) -> bool:
        return not self.snap.spans

    @property
    def running(self) -> bool:
        """A live run still going: after a stage's last finished step it may well be computing (its
        span has not ended), so that stretch is not shown as idle (drain) yet."""
        return self.snap.live and (not self.snap.status or self.snap.status[-1].state == "running")


@dataclass(slots=True)
class _Derived:
    """What a view derives from its spans, extended span by span."""
    builder: FrameBuilder
    acc: FigureAccumulator

    @classmethod
    def of(cls, snap: Snapshot) -> _Derived:
        origin = min((s["t0"] for s in snap.spans), default=0)
        return cls(FrameBuilder(origin, snap.num_stages or None), FigureAccumulator()).add(snap.spans)

    def add(self, spans: list[dict[str, Any]]) -> _Derived:
        self.builder.add(spans)
        self.acc.add(spans)
        return self

    def view(self, source: Source, snap: Snapshot) -> View:
        fr = self.builder.frames()
        if not len(fr.requests) or not fr.num_stages:
            return View(snap, fr, None, source)
        policy = self.acc.policy or ""
        meta = {"policy": policy, "engine": source.kind, "model": "", "hardware": "", "concurrency": 0,
                "workload": ""}
        idle = self.acc.idle_intervals(fr.num_stages)
        return View(snap, fr, self.acc.figures(fr.num_stages, meta, idle), source, idle)


def make_view(source: Source, snap: Snapshot) -> View:
    return _Derived.of(snap).view(source, snap)


@dataclass(slots=True)
class _Entry:
    view: View
    derived: _Derived


class ViewCache:
    """The last view of each run, keyed on the snapshot's position (spans received, status, knobs).

    Tables and figures are recomputed only when the position moved, so a finished run costs
    nothing but its poll however often it is drawn. When the stream moved by spans appended to
    those already derived (same run, nothing dropped, none starting before the view's origin),
    the tables are extended by the new spans alone instead of being rebuilt."""

    def __init__(self, keep: int = 16) -> None:
        self.keep = keep
        self._entries: dict[str, _Entry] = {}
        self._lock = threading.Lock()        # sessions share the cache (one per source); derived tables grow in place

    def view(self, source: Source, snap: Snapshot) -> View:
        with self._lock:
            return self._view(source, snap)

    def _view(self, source: Source, snap: Snapshot) -> View:
        entry = self._entries.get(snap.run_id)
        if entry is not None and snap.position and entry.view.snap.position == snap.position:
            old = entry.view                 # the banner's fields may have moved
            return View(snap, old.frames, old.figures, source, old.idle)
        derived = self._extend(entry, snap) if entry is not None else None
        if derived is None:
            derived = _Derived.of(snap)
        view = derived.view(source, snap)
        self._entries.pop(snap.run_id, None)
        self._entries[snap.run_id] = _Entry(view, derived)
        while len(self._entries) > self.keep:
            del self._entries[next(iter(self._entries))]
        return view

    @staticmethod
    def _extend(entry: _Entry, snap: Snapshot) -> _Derived | None:
        """The entry's tables extended by the snapshot's new spans; None when they are not a pure
        append (another run, spans dropped from the window, a restart, stages changed)."""
        old, derived = entry.view.snap, entry.derived
        builder = derived.builder
        grown = snap.received - old.received
        if (snap.run_id != old.run_id or grown < 0 or len(snap.spans) - builder.count != grown
                or (snap.num_stages or None) != builder.num_stages):
            return None
        new = snap.spans[builder.count:]
        if not builder.can_add(new):
            return None
        return derived.add(new)
