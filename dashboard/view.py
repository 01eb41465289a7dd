"""One view of a run: the source's snapshot, its tables and its figures (DESIGN §7)."""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from wavepp.dashboard.frames import FrameBuilder, Frames
from wavepp.dashboard.sources import Snapshot, Source
from wavepp.runtime.figures.idle_causes import IdleInterval
from wavepp.runtime.figures.report import FigureAccumulator, RunFigures
from wavepp.telemetry import names as N


@dataclass(slots=True)
class View:
    snap: Snapshot
    frames: Frames
    figures: RunFigures | None
    source: Source
    idle: list[IdleInterval] = field(default_factory=list)   # every stage's idle intervals with their cause
    decisions: list[dict[str, Any]] = field(default_factory=list)   # the autopilot's decision spans, in order
    samples_note: str | None = None    # percentiles of the newest requests only (a long live run), in words

    @property
    def empty(self) -> bool:
        return not self.snap.spans

    @property
    def running(self) -> bool:
        """A live run still going: after a stage's last finished step it may well be computing (its
        span has not ended), so that stretch is not shown as idle (drain) yet."""
        return self.snap.live and (not self.snap.status or self.snap.status[-1].state == "running")


# A session-state flag: the next draw reads its source now, not the follower's last view (a page that just
# wrote knobs shows their version at once).
READ_NOW = "view_read_now"

# A live view holds the tables of at most this many stage steps (about 3 minutes of the embedded
# sim demo); past it, the older half is dropped - the run's figures (tiles) still count every span.
LIVE_STEPS_HELD = 40_000
# The autopilot's decisions a view holds (one a window: 30 s windows make 2,000 about 17 hours).
DECISIONS_HELD = 2_000
# A live view's percentiles are those of the newest this many requests (and admitting rounds); counts,
# sums and means cover the run. About 40 minutes of the embedded sim demo; held in arrays allocated at once
# (runtime/figures/sample_ring.py: 8 bytes a value, 16 a round), so they do not grow the view's memory as they fill.
LIVE_SAMPLES_HELD = 100_000
# Below this many spans derived, a span starting before the view's origin rebuilds the view (the
# same tables as one built at once); above it, the span is appended at a negative time instead.
REBUILD_BELOW = 20_000


@dataclass(slots=True)
class _Derived:
    """What a view derives from its spans, extended span by span."""
    builder: FrameBuilder
    acc: FigureAccumulator
    trimmed: bool = False            # the tables hold the recent part of the run only
    decisions: deque[dict[str, Any]] = field(default_factory=lambda: deque(maxlen=DECISIONS_HELD))

    def bound(self, steps_held: int) -> None:
        """Keep the tables to ``steps_held`` stage steps: past it, forget what ended before the
        newer half of them began (the idle split's steps with them)."""
        if self.builder.num_steps <= steps_held:
            return
        ends = sorted(r[3] for r in self.builder.steps.rows)
        cut = ends[len(ends) // 2]
        self.builder.trim(cut)
        self.acc.idle.trim(self.builder.origin_ns + int(cut * 1e9))
        self.trimmed = True

    @classmethod
    def of(cls, snap: Snapshot) -> _Derived:
        spans = list(snap.spans)             # a live source's window decodes as it is read: once
        origin = min((s["t0"] for s in spans), default=0)
        held = LIVE_SAMPLES_HELD if snap.live else None      # a saved run's figures: exact, as the bench's
        return cls(FrameBuilder(origin, snap.num_stages or None), FigureAccumulator(held)).add(spans)

    def add(self, spans: Sequence[dict[str, Any]]) -> _Derived:
        self.builder.add(spans)
        self.acc.add(spans)
        self.decisions.extend(s for s in spans if s["n"] == N.AUTOPILOT_DECISION)
        return self

    def view(self, source: Source, snap: Snapshot) -> View:
        fr = self.builder.frames()
        decisions = list(self.decisions)
        if not len(fr.requests) or not fr.num_stages:
            return View(snap, fr, None, source, decisions=decisions)
        policy = self.acc.policy or ""
        meta = {"policy": policy, "engine": source.kind, "model": "", "hardware": "", "concurrency": 0,
                "workload": ""}
        origin, end = self.acc.window()
        if self.trimmed:             # the idle split starts where the tables do
            origin = max(origin, self.builder.origin_ns + int(fr.start * 1e9))
        idle = self.acc.idle.intervals(fr.num_stages, origin, end)
        dropped = self.acc.samples_dropped
        note = (f"percentiles of the newest {len(self.acc.latencies):,} requests (of {self.acc.num_completed:,} "
                f"completed); counts and means cover the run") if dropped else None
        return View(snap, fr, self.acc.figures(fr.num_stages, meta, idle), source, idle, decisions, note)


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
    those already derived (same run), the tables are extended by the new spans alone instead of
    being rebuilt - also when the source's bounded window dropped old spans meanwhile - and held
    to ``steps_held`` stage steps: an update costs the new spans, not the run."""

    def __init__(self, keep: int = 16, steps_held: int = LIVE_STEPS_HELD) -> None:
        self.keep = keep
        self.steps_held = steps_held
        self._entries: dict[str, _Entry] = {}
        self._lock = threading.Lock()        # sessions share the cache (one per source); derived tables grow in place

    def view(self, source: Source, snap: Snapshot) -> View:
        with self._lock:
            return self._view(source, snap)

    def _view(self, source: Source, snap: Snapshot) -> View:
        entry = self._entries.get(snap.run_id)
        if entry is not None and snap.position and entry.view.snap.position == snap.position:
            old = entry.view                 # the banner's fields may have moved
            return View(snap, old.frames, old.figures, source, old.idle, old.decisions, old.samples_note)
        derived = self._extend(entry, snap) if entry is not None else None
        if derived is None:
            derived = _Derived.of(snap)
        derived.bound(self.steps_held)
        view = derived.view(source, snap)
        self._entries.pop(snap.run_id, None)
        self._entries[snap.run_id] = _Entry(view, derived)
        while len(self._entries) > self.keep:
            del self._entries[next(iter(self._entries))]
        return view

    @staticmethod
    def _extend(entry: _Entry, snap: Snapshot) -> _Derived | None:
        """The entry's tables extended by the snapshot's new spans - the last ``received`` grew by,
        whether or not a bounded window dropped older ones meanwhile; None when they cannot be
        (another run, a restart, stages changed, more new spans than the window holds, or, while
        the view is small, a span starting before its origin)."""
        old, derived = entry.view.snap, entry.derived
        builder = derived.builder
        grown = snap.received - old.received
        if (snap.run_id != old.run_id or grown < 0 or grown > len(snap.spans)
                or (snap.num_stages or None) != builder.num_stages):
            return None
        new = snap.spans[len(snap.spans) - grown:]
        if builder.count < REBUILD_BELOW and not builder.can_add(new):
            return None
        return derived.add(new)
