"""Where the time went: each stage's idle time split by cause, from the spans alone.

A stage is idle between its execute spans. Each idle instant gets the first cause, in this
order, whose interval covers it (the gap before the stage's wave ``w``)::

    fill            before the stage's first step (the pipeline filling up)
    drain           after its last step, until the run's last completion
    kv_capacity     the stage blocked on KV capacity (stage-wait spans: a baseline's local retry)
    preparation     the stage preparing ``w`` (materialize span): stage-local work on the critical path
    transfer        (stage > 0) ``w`` moving from the previous stage (its send span)
    previous_stage  (stage > 0) before that: the previous stage had not finished ``w``
    admission       (stage 0) an admission round the loop ran itself (inline admission: the round
                    span's ``wavepp.admission.critical_path``)
    ring_full       (stage 0) R waves in flight: no slot until the last stage retires one
    no_work         (stage 0) before ``w`` was planned otherwise: nothing admitted to plan (or
                    the planner waiting for a fuller wave)
    other           whatever none of these covers (event-loop turns between two spans)

The result is a list of :class:`IdleInterval` (stage, start, end, cause, the wave waited for):
the one place idle time is split, for the bench's sums (:func:`idle_causes`) and the dashboard's
coloured bubbles alike. The intervals of one stage tile its idle time, ``makespan - busy_s``.

:class:`IdleTracker` takes spans as they arrive and keeps the gaps it already split: a gap is
split again only when spans that could cover it arrived since (a live view that moved by a few
spans pays for the recent gaps, not the run).
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Sequence
from typing import Any, NamedTuple

from wavepp.telemetry import names as N

CAUSES = ("fill", "drain", "kv_capacity", "preparation", "transfer", "previous_stage", "admission",
          "ring_full", "no_work", "other")

# What each cause means, in an operator's words (the dashboard's legend, hover and reading).
MEANING = {
    "fill": "pipeline filling",
    "drain": "pipeline draining",
    "kv_capacity": "waiting for KV capacity",
    "preparation": "preparing the wave (on the critical path)",
    "transfer": "the wave crossing the link",
    "previous_stage": "waiting for the previous stage",
    "admission": "admission on the critical path",
    "ring_full": "ring full (no wave slot)",
    "no_work": "waiting for admitted work",
    "other": "unexplained (event-loop turns)",
}

Span = dict[str, Any]
Interval = tuple[int, int]


class IdleInterval(NamedTuple):
    stage: int
    t0: int             # ns, on the spans' clock
    t1: int
    cause: str          # one of CAUSES
    wave: int           # the wave the stage waited for (-1: none, e.g. drain)


class Cover:
    """The union of some intervals, as sorted disjoint intervals (a cause covers an instant or not)."""

    def __init__(self, intervals: Sequence[Interval]) -> None:
        merged: list[list[int]] = []
        for x, y in sorted(intervals):
            if y <= x:
                continue
            if merged and x <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], y)
            else:
                merged.append([x, y])
        self.starts = [x for x, _ in merged]
        self.ends = [y for _, y in merged]

    def within(self, a: int, b: int) -> list[Interval]:
        """The covered parts of ``[a, b)``, in order."""
        out = []
        i = bisect.bisect_right(self.ends, a)
        while i < len(self.starts) and self.starts[i] < b:
            out.append((max(a, self.starts[i]), min(b, self.ends[i])))
            i += 1
        return out


NONE = Cover(())


def _paint(a: int, b: int, layers: Sequence[tuple[str, Cover]]) -> list[tuple[str, int, int]]:
    """Give every instant of ``[a, b)`` to the first layer that covers it; the rest to ``other``.
    Returns (cause, t0, t1) pieces in time order."""
    pieces: list[tuple[str, int, int]] = []
    free = [(a, b)]
    for cause, cover in layers:
        rest: list[Interval] = []
        for x, y in free:
            cursor = x
            for c0, c1 in cover.within(x, y):
                if c0 > cursor:
                    rest.append((cursor, c0))
                pieces.append((cause, c0, c1))
                cursor = c1
            if cursor < y:
                rest.append((cursor, y))
        free = rest
        if not free:
            break
    pieces += [("other", x, y) for x, y in free]
    pieces.sort(key=lambda p: p[1])
    return pieces


class RingState(NamedTuple):
    """Where :func:`_ring_full` stands after some events: waves in flight, the ring size in force,
    and since when the ring has been full (None: it is not)."""
    in_flight: int = 0
    ring: int = 0
    full_since: int | None = None


EMPTY_RING = RingState()


def _ring_full(plans: Sequence[tuple[int, int, int]], retired: Sequence[int],
               state: RingState = EMPTY_RING) -> tuple[list[Interval], RingState]:
    """Intervals in which the waves planned but not retired reached the ring size, from ``state`` on;
    an interval still open after the last event is not among them (the state says since when).

    ``plans``: (plan end ns, wave id, ring size); ``retired``: retire times; both later than the
    events ``state`` folded."""
    events = [(t, +1, ring) for t, _, ring in plans] + [(t, -1, 0) for t in retired]
    events.sort(key=lambda e: (e[0], e[1]))        # a retirement before a plan at the same instant
    out: list[Interval] = []
    in_flight, ring, start = state
    for t, delta, r in events:
        if r:
            ring = r
        in_flight += delta
        full = ring > 0 and in_flight >= ring
        if full and start is None:
            start = t
        elif not full and start is not None:
            out.append((start, t))
            start = None
    return out, RingState(in_flight, ring, start)


class _Layers:
    """What can cover a gap, built once per :meth:`IdleTracker.intervals` call."""

    def __init__(self, tracker: IdleTracker, num_stages: int) -> None:
        plans = sorted(tracker.plans)
        self.planned_at = tracker.planned_folded | {w: t for t, w, _ in plans}
        folded = tracker.ring_folded_until          # plans and retirements before it are in ring_state
        retired = tracker.retirements(num_stages, folded)
        full, self.ring_end = _ring_full([p for p in plans if p[0] >= folded], retired, tracker.ring_state)
        self.ring_full = Cover(tracker.ring_early + full)
        self.rounds = Cover(tracker.rounds) if tracker.rounds else NONE
        self.waits = {s: Cover(w) for s, w in tracker.waits.items()}
        self.prepare, self.sends = tracker.prepare, tracker.sends

    def of(self, s: int, w: int) -> list[tuple[str, Cover]]:
        """The causes that can cover a gap of stage ``s`` before wave ``w``, in priority order."""
        prep = self.prepare.get((s, w))
        layers = [("kv_capacity", self.waits.get(s, NONE)), ("preparation", Cover([prep]) if prep else NONE)]
        if s > 0:
            send = self.sends.get((s - 1, w))
            if send is not None:
                layers += [("transfer", Cover([send])), ("previous_stage", Cover([(0, send[0])]))]
            return layers
        layers += [("admission", self.rounds), ("ring_full", self.ring_full)]
        if w in self.planned_at:
            layers.append(("no_work", Cover([(0, self.planned_at[w])])))
        return layers


class IdleTracker:
    """Idle intervals of a run whose spans arrive over time (:meth:`add`, then :meth:`intervals`).

    A gap between two execute steps is split once and kept; it is split again only when a span
    that could cover it (one starting before the gap's end, or the plan of its wave) arrived
    since, so :meth:`intervals` after a few new spans costs the recent gaps."""

    def __init__(self) -> None:
        self.executes: dict[int, list[tuple[int, int, int]]] = defaultdict(list)   # stage -> (t0, t1, wave)
        self.prepare: dict[tuple[int, int], Interval] = {}
        self.sends: dict[tuple[int, int], Interval] = {}
        self.waits: dict[int, list[Interval]] = defaultdict(list)
        self.plans: list[tuple[int, int, int]] = []
        self.rounds: list[Interval] = []                    # admission rounds on the loop's critical path
        # What a settling tracker (runtime.figures.idle_settle) folded away: the ring's state after the plans
        # and retirements it forgot, the ring-full intervals before its settled part, the retirements of the
        # last stage's merged steps, the plan times of waves still to run on stage 0, and per stage the one
        # step that stands for its settled steps (no gap inside it is split again).
        self.ring_state = EMPTY_RING
        self.ring_folded_until = -1
        self.ring_early: list[Interval] = []
        self.retired: list[int] = []
        self.planned_folded: dict[int, int] = {}
        self.merged: dict[int, tuple[int, int, int]] = {}
        self._split: dict[tuple[int, int, int, int], list[IdleInterval]] = {}   # (s, a, b, w) -> its pieces
        self._split_for: int | None = None                 # the number of stages the kept splits assumed
        self._dirty_from: float = float("inf")             # kept gaps ending after this are split again
        self._dirty_waves: set[int] = set()

    def _touch(self, t: int) -> None:
        self._dirty_from = min(self._dirty_from, t)

    def add(self, spans: Sequence[Span]) -> IdleTracker:
        for sp in spans:
            n, a = sp["n"], sp["a"]
            t0, t1 = sp["t0"] or 0, sp["t1"] or 0
            if n == N.EXECUTE:
                self.executes[int(a[N.STAGE])].append((t0, t1, int(a.get(N.WAVE_ID, -1))))
            elif n == N.MATERIALIZE and N.WAVE_ID in a:
                key = int(a[N.STAGE]), int(a[N.WAVE_ID])
                self._touch(self.prepare.get(key, (t0, t1))[0])     # a replaced interval uncovers its gaps too
                self.prepare[key] = (t0, t1)
            elif n == N.SEND and N.WAVE_ID in a:
                key = int(a[N.STAGE]), int(a[N.WAVE_ID])
                self._touch(self.sends.get(key, (t0, t1))[0])
                self.sends[key] = (t0, t1)
            elif n == N.STAGE_WAIT:
                self.waits[int(a[N.STAGE])].append((t0, t1))
            elif n == N.WAVE_PLAN and N.WAVE_ID in a:
                self.plans.append((t1, int(a[N.WAVE_ID]), int(a.get(N.RING, 0))))
                if self._split:             # a mark only re-splits kept gaps (none kept: a bench's whole run)
                    self._dirty_waves.add(int(a[N.WAVE_ID]))
            elif n == N.ADMISSION_ROUND and a.get(N.ADMISSION_CRITICAL):
                self.rounds.append((t0, t1))
            else:
                continue
            self._touch(t0)
        return self

    def retirements(self, num_stages: int, since: int, until: float = float("inf")) -> list[int]:
        """When waves retired (the last stage's steps ended) in ``[since, until)``: the steps held and those
        a settling tracker merged away (the step standing for them is not one)."""
        merged = self.merged.get(num_stages - 1)
        return ([t for t in self.retired if since <= t < until]
                + [e[1] for e in self.executes.get(num_stages - 1, ()) if e != merged and since <= e[1] < until])

    def trim(self, cut: int) -> None:
        """Forget the steps, plans and rounds that ended before ``cut`` (ns): a live view keeps the
        recent part of a run. Gaps well after ``cut`` split as before; the first ones after it may
        lose a cover that ended before it (a wave planned earlier, in flight across the cut)."""
        for s, steps in self.executes.items():
            self.executes[s] = [e for e in steps if e[1] >= cut]
        self.prepare = {k: v for k, v in self.prepare.items() if v[1] >= cut}
        self.sends = {k: v for k, v in self.sends.items() if v[1] >= cut}
        for s, waits in self.waits.items():
            self.waits[s] = [w for w in waits if w[1] >= cut]
        self.plans = [p for p in self.plans if p[0] >= cut]
        self.rounds = [r for r in self.rounds if r[1] >= cut]
        self._split = {k: v for k, v in self._split.items() if k[2] >= cut}

    def intervals(self, num_stages: int, origin: int, end: int) -> list[IdleInterval]:
        """Every idle interval of every stage over ``[origin, end]`` (ns), stage by stage in time order."""
        if self._split_for != num_stages:
            self._split.clear()
            self._split_for = num_stages
        dirty_from, dirty_waves = self._dirty_from, self._dirty_waves
        self._dirty_from, self._dirty_waves = float("inf"), set()
        layers: _Layers | None = None
        kept: dict[tuple[int, int, int, int], list[IdleInterval]] = {}
        out: list[IdleInterval] = []
        for s in range(num_stages):
            mine = self.executes.get(s, [])
            mine.sort()
            steps = [e for e in mine if e[1] > origin]
            if not steps:
                if end > origin:
                    out.append(IdleInterval(s, origin, end, "fill", -1))
                continue
            if steps[0][0] > origin:
                out.append(IdleInterval(s, origin, steps[0][0], "fill", steps[0][2]))
            busy_until = steps[0][1]
            for t0, t1, w in steps[1:]:
                if t0 > busy_until:
                    key = (s, busy_until, t0, w)
                    pieces = self._split.get(key)
                    if pieces is None or t0 > dirty_from or w in dirty_waves:
                        layers = layers or _Layers(self, num_stages)
                        pieces = [IdleInterval(s, x, y, cause, w) for cause, x, y in _paint(busy_until, t0,
                                                                                           layers.of(s, w))]
                    kept[key] = pieces
                    out += pieces
                busy_until = max(busy_until, t1)
            last = max(t1 for _, t1, _ in steps)
            if end > last:
                out.append(IdleInterval(s, last, end, "drain", -1))
        self._split = kept
        return out


def sums(intervals: Sequence[IdleInterval], num_stages: int,
         settled: Sequence[dict[str, int]] | None = None) -> list[dict[str, float]]:
    """Per stage, seconds of idle time by cause (keys: :data:`CAUSES`); ``settled``: per stage,
    nanoseconds by cause already split (:mod:`runtime.figures.idle_settle`), added to them."""
    counts = [dict(c) for c in settled] if settled is not None else [dict.fromkeys(CAUSES, 0)
                                                                       for _ in range(num_stages)]
    for iv in intervals:
        counts[iv.stage][iv.cause] += iv.t1 - iv.t0
    return [{c: v / 1e9 for c, v in stage.items()} for stage in counts]


def idle_intervals(spans: Sequence[Span], num_stages: int, origin: int, end: int) -> list[IdleInterval]:
    """Every idle interval of every stage over ``[origin, end]`` (ns), each with its cause."""
    return IdleTracker().add(spans).intervals(num_stages, origin, end)


def idle_causes(spans: Sequence[Span], num_stages: int, origin: int, end: int) -> list[dict[str, float]]:
    """Per stage, seconds of idle time by cause (keys: :data:`CAUSES`) over ``[origin, end]`` (ns)."""
    return sums(idle_intervals(spans, num_stages, origin, end), num_stages)


def top_causes(causes: dict[str, float], makespan_s: float, k: int = 2) -> str:
    """``"no_work 4.2%, fill 1.9%"``: the largest causes as a share of the makespan."""
    ranked = sorted(((v, c) for c, v in causes.items() if v > 0), reverse=True)[:k]
    return ", ".join(f"{c} {v / makespan_s:.1%}" for v, c in ranked) if makespan_s > 0 else ""


class LiveIdle:
    """Idle seconds by cause of a run that does not end (a server), handed out as they settle.

    Each :meth:`settle` gives the idle time, per (stage, cause), between the previous horizon and a
    new one: ``slack_ns`` before the earliest of the stages' latest finished steps. Gaps before it
    are closed on every stage, so the spans that could still change their split have (nearly
    always) arrived; ``drain`` is never settled (a live stage past its last finished step may be
    computing). The spans are held in an :class:`IdleTracker`; :meth:`restart` replaces it by one
    built from recent spans only (a server's memory stays bounded), keeping the horizon."""

    def __init__(self, num_stages: int, slack_ns: int = 1_000_000_000) -> None:
        self.num_stages = num_stages
        self.slack_ns = slack_ns
        self.tracker = IdleTracker()
        self.spans_held = 0
        self.origin: int | None = None        # the first span's start: the run's fill counts from here
        self.settled_until: int | None = None

    def add(self, spans: Sequence[Span]) -> None:
        if spans and self.origin is None:
            self.origin = min(int(sp["t0"] or 0) for sp in spans)
        self.tracker.add(spans)
        self.spans_held += len(spans)

    def restart(self, recent: Sequence[Span]) -> None:
        self.tracker = IdleTracker()
        self.spans_held = 0
        self.tracker.add(recent)
        self.spans_held = len(recent)

    def settle(self) -> dict[tuple[int, str], float]:
        """Seconds idle per (stage, cause) newly settled since the last call (empty: nothing yet)."""
        if self.origin is None:
            return {}
        latest = [max((t1 for _, t1, _ in self.tracker.executes.get(s, ())), default=None)
                  for s in range(self.num_stages)]
        if any(t is None for t in latest):
            return {}                         # a stage has not finished a step yet: its fill is open
        horizon = min(t for t in latest if t is not None) - self.slack_ns
        low = self.origin if self.settled_until is None else self.settled_until
        if horizon <= low:
            return {}
        out: dict[tuple[int, str], float] = defaultdict(float)
        for iv in self.tracker.intervals(self.num_stages, self.origin, horizon):
            a, b = max(iv.t0, low), min(iv.t1, horizon)
            if b > a and iv.cause != "drain":
                out[iv.stage, iv.cause] += (b - a) / 1e9
        self.settled_until = horizon
        return dict(out)
