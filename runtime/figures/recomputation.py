"""Recomputation after a late fallback: busy time a stage spent on work a fallback threw away.

(A re-admission - a request sent back to admission with its boundary kept, after a policy change
left it no room on a stage - discards its chunks the same way and counts the same.)

A late fallback (a baseline's stage-local admission finds less of the prefix than the first
stage promised, :mod:`runtime.mechanisms.stage_admission`) releases the request everywhere and
sends it back to admission with a lower boundary. Every chunk of it a stage ran before the
fallback is lost with the attempt's blocks and is computed again once the request is
re-admitted: that is the recomputation. (The tokens between the lowered boundary and the one
first promised are not counted: a policy that plans on the prefix every stage holds computes
them too.)

It is busy time, not idle time (the stage is computing), so it is reported beside the idle
causes: per stage, seconds of execute time, from the spans alone. A step's time is shared among
its chunks by their token counts (a step's cost is not linear in tokens, so this estimates the
share; it is exact when a step holds one chunk).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from wavepp.telemetry import names as N

Span = dict[str, Any]
# The events after which a request starts over, its earlier chunks discarded.
RESTARTS = (N.EVENT_FALLBACK, N.EVENT_READMITTED)
# Ended requests remembered for a chunk span that arrives after its request's (spans from several processes
# interleave, within a span stream reader's batch: about a second). At the embedded demo's 46 requests a
# second that is 3.6 minutes of lateness, 43 s at five times its rate; the ids held take ~1.5 MB, which a
# live view holds once its windows are full (each id ~150 bytes with its dict slot).
ENDED_HELD = 10_000


class RecomputeTracker:
    """Recomputation of a run whose spans arrive over time, in any order (:meth:`add`, then
    :meth:`seconds`). A request's chunks are held until its own span (it ends after its last
    chunk) says when it last fell back; then they are settled and forgotten."""

    def __init__(self) -> None:
        self._pending: dict[str, list[tuple[int, int, float]]] = defaultdict(list)  # rid -> (t0, stage, s)
        self._last_fallback: dict[str, int] = {}     # ended requests: time of the last fallback (0: none)
        self._lost: dict[int, float] = defaultdict(float)

    def add(self, spans: Sequence[Span]) -> RecomputeTracker:
        for sp in spans:
            if sp["n"] == N.EXECUTE:
                self._execute(sp)
            elif sp["n"] == N.REQUEST:
                rid = str(sp["a"].get(N.REQUEST_ID))
                last = max((int(t) for name, t, _ in sp.get("ev", ()) if name in RESTARTS), default=0)
                self._last_fallback[rid] = last
                if len(self._last_fallback) > ENDED_HELD:
                    del self._last_fallback[next(iter(self._last_fallback))]
                for t0, stage, seconds in self._pending.pop(rid, ()):
                    self._settle(rid, t0, stage, seconds)
        return self

    def _execute(self, sp: Span) -> None:
        a = sp["a"]
        rids, lengths = a.get(N.REQUEST_IDS, ()), a.get(N.CHUNK_TOKENS)
        total = sum(lengths or ())
        if not lengths or not total:
            return
        t0, stage = sp["t0"] or 0, int(a[N.STAGE])
        dur = ((sp["t1"] or 0) - t0) / 1e9
        for rid, n in zip(rids, lengths, strict=True):
            if rid in self._last_fallback:
                self._settle(rid, t0, stage, dur * n / total)
            else:
                self._pending[rid].append((t0, stage, dur * n / total))

    def _settle(self, rid: str, t0: int, stage: int, seconds: float) -> None:
        if self._last_fallback[rid] > t0:        # an attempt a later fallback abandoned
            self._lost[stage] += seconds

    def seconds(self, num_stages: int) -> list[float]:
        """Per stage, execute seconds spent on chunks a later fallback of their request discarded
        (requests still running are not counted yet)."""
        return [self._lost.get(s, 0.0) for s in range(num_stages)]


def recomputation_s(spans: Sequence[Span], num_stages: int) -> list[float]:
    """Per stage, seconds of execute time spent on chunks a later fallback of their request discarded."""
    return RecomputeTracker().add(spans).seconds(num_stages)
