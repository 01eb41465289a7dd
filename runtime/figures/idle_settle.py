"""A whole run's idle split, settled while the run goes: memory bounded by the gaps still open.

:class:`~runtime.figures.idle_causes.IdleTracker` keeps every step, preparation, send and plan until
the split is asked for (a live view splits its window again and again). A bench asks once, at the
end: :class:`SettlingIdle` splits each gap as soon as no span still to come can change it, adds its
pieces to per-stage sums, and forgets what only settled gaps needed. Its sums are the whole run's,
to the nanosecond, for spans that arrive in the order they end (one process's span stream; the
figure aggregator assumes the same of a source halt).

When the gap ``[a, b)`` of stage ``s`` before its step of wave ``w`` is final:

* A stage > 0's covers are its waits for KV capacity and its preparation of ``w`` (the waits run
  inside the materialize span), and ``w``'s send from the previous stage: work the step waited for,
  so they ended, and arrived, before the step did (``runtime.stage_tasks``). The gap is final once
  its step has arrived.
* Stage 0's covers also include the admission rounds the loop ran itself and the ring being full.
  Those rounds run in the dispatcher one after another with its plans (``runtime.loop``): once a
  plan or round that started at ``b`` or later has arrived, every round that started before ``b``
  has ended and arrived (:attr:`SettlingIdle.horizon`). Whether the ring was full before ``b``
  follows from the plans and retirements before ``b``, which ended before that plan or round
  started; a ring-full stretch still open counts only once it closes (the whole-run split drops one
  that never does), so stage 0 settles no gap past the start of an open one.
* The run's origin (its first arrival, from the request spans) can only move earlier as requests
  complete: a gap is split from the origin known then, and what came before it is kept.

Settled steps of a stage are replaced by one step from the first one's start to the last one's end
(``IdleTracker.merged``): no gap inside it is split again, and the gaps around it split as before.
"""

from __future__ import annotations

from collections.abc import Sequence

from wavepp.runtime.figures.idle_causes import CAUSES, IdleTracker, Span, _Layers, _paint, _ring_full, sums
from wavepp.telemetry import names as N

# Spans added between two settles: each settle walks what is held (a few thousand steps), so the run's
# memory stays within about that many spans' steps and the walk costs a few microseconds a span.
SETTLE_EVERY = 4096


class SettlingIdle:
    """Idle nanoseconds by cause of a run whose spans arrive in the order they end (:meth:`add`), split
    as the gaps settle; :meth:`sums` adds the gaps still open, over the run's window."""

    def __init__(self, num_stages: int) -> None:
        self.num_stages = num_stages
        self.tracker = IdleTracker()
        self.settled = [dict.fromkeys(CAUSES, 0) for _ in range(num_stages)]   # per stage: ns by cause
        self.horizon = -1        # the latest start of a dispatcher span (a plan, a round the loop waited for)
        self._since = 0

    def add(self, spans: Sequence[Span], origin: int | None) -> None:
        """``origin``: the run's first arrival known so far (None: no request has ended yet)."""
        self.tracker.add(spans)
        for sp in spans:
            n = sp["n"]
            if n == N.WAVE_PLAN or (n == N.ADMISSION_ROUND and sp["a"].get(N.ADMISSION_CRITICAL)):
                self.horizon = max(self.horizon, sp["t0"] or 0)
        self._since += len(spans)
        if self._since >= SETTLE_EVERY and origin is not None:
            self._since = 0
            self.settle(origin)

    def settle(self, origin: int) -> None:
        """Split every gap after ``origin`` that no later span can change; forget what only they needed."""
        tr = self.tracker
        layers = _Layers(tr, self.num_stages)
        open_since = layers.ring_end.full_since
        stage0_limit = self.horizon if open_since is None else min(self.horizon, open_since)
        for s in range(self.num_stages):
            steps = sorted(e for e in tr.executes.get(s, ()) if e[1] > origin)
            limit = stage0_limit if s == 0 else None
            busy_until, last = (steps[0][1], 0) if steps else (0, 0)
            for j in range(1, len(steps)):
                t0, t1, w = steps[j]
                if t0 > busy_until:
                    if limit is not None and t0 > limit:
                        break
                    counts = self.settled[s]
                    for cause, x, y in _paint(busy_until, t0, layers.of(s, w)):
                        counts[cause] += y - x
                busy_until = max(busy_until, t1)
                last = j
            if last:
                self._merge(s, steps[: last + 1], busy_until)

    def _merge(self, s: int, block: Sequence[tuple[int, int, int]], end: int) -> None:
        """Replace stage ``s``'s settled steps ``block`` by one step ending at ``end``; forget their waves'
        preparations and sends, and the waits (rounds, plans, ring events: stage 0) inside it."""
        tr = self.tracker
        first = block[0]
        start = first[0]
        gone = set(block)
        previous = tr.merged.get(s)
        if s == self.num_stages - 1:       # the last stage's steps are the ring's retirements
            tr.retired += [e[1] for e in block if e != previous]
        tr.executes[s] = [e for e in tr.executes[s] if e not in gone]
        tr.merged[s] = merged = (start, end, first[2])
        tr.executes[s].append(merged)
        waves = [w for _, _, w in block]
        for w in waves:
            tr.prepare.pop((s, w), None)
            if s > 0:
                tr.sends.pop((s - 1, w), None)
        tr.waits[s] = [x for x in tr.waits.get(s, ()) if not (x[0] >= start and x[1] <= end)]
        if s == 0:
            tr.rounds = [r for r in tr.rounds if not (r[0] >= start and r[1] <= end)]
            self._fold_ring(start, end)
            for w in waves:                 # after the fold, which moves the plans' times here
                tr.planned_folded.pop(w, None)

    def _fold_ring(self, start: int, until: int) -> None:
        """Fold the plans and retirements before ``until`` (the end of stage 0's settled steps: every span
        that ended before it has arrived) into the ring's state; keep the ring-full stretches that begin
        before ``start`` (gaps before the settled steps may still be split, should the origin move)."""
        tr = self.tracker
        if until <= tr.ring_folded_until:
            return
        plans = sorted(p for p in tr.plans if p[0] < until)
        retired = tr.retirements(self.num_stages, tr.ring_folded_until, until)
        closed, tr.ring_state = _ring_full(plans, retired, tr.ring_state)
        tr.ring_early += [iv for iv in closed if iv[0] < start]
        tr.ring_folded_until = until
        tr.planned_folded.update({w: t for t, w, _ in plans})
        tr.plans = [p for p in tr.plans if p[0] >= until]
        tr.retired = [t for t in tr.retired if t >= until]

    def sums(self, origin: int, end: int) -> list[dict[str, float]]:
        """Per stage, seconds idle by cause over ``[origin, end]`` (ns): the settled gaps and the rest."""
        return sums(self.tracker.intervals(self.num_stages, origin, end), self.num_stages, self.settled)
