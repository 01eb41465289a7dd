"""Where the time went: each stage's idle time split by cause, from the spans alone.

A stage is idle between its execute spans. Each idle instant gets the first cause, in this
order, whose interval covers it (the gap before the stage's wave ``w``)::

    fill            before the stage's first step (the pipeline filling up)
    drain           after its last step, until the run's last completion
    kv_capacity     the stage blocked on KV capacity (stage-wait spans: a baseline's local retry)
    preparation     the stage preparing ``w`` (materialize span): stage-local work on the critical path
    transfer        (stage > 0) ``w`` moving from the previous stage (its send span)
    previous_stage  (stage > 0) before that: the previous stage had not finished ``w``
    admission       (stage 0) an admission round the loop ran itself (inline admission)
    ring_full       (stage 0) R waves in flight: no slot until the last stage retires one
    no_work         (stage 0) before ``w`` was planned otherwise: nothing admitted to plan (or
                    the planner waiting for a fuller wave)
    other           whatever none of these covers (event-loop turns between two spans)

The causes of one stage sum to its idle time, ``makespan - busy_s``.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from telemetry import names as N

CAUSES = ("fill", "drain", "kv_capacity", "preparation", "transfer", "previous_stage", "admission",
          "ring_full", "no_work", "other")

Span = dict[str, Any]
Interval = tuple[int, int]


def _overlap(a: int, b: int, intervals: Sequence[Interval]) -> list[Interval]:
    return [(max(a, x), min(b, y)) for x, y in intervals if x < b and y > a]


def _paint(a: int, b: int, layers: Sequence[tuple[str, Sequence[Interval]]], out: dict[str, int]) -> None:
    """Give every instant of ``[a, b)`` to the first layer that covers it; the rest to ``other``."""
    free = [(a, b)]
    for cause, intervals in layers:
        rest: list[Interval] = []
        for x, y in free:
            cuts = sorted(_overlap(x, y, intervals))
            cursor = x
            for c0, c1 in cuts:
                if c1 <= cursor:
                    continue
                c0 = max(c0, cursor)
                if c0 > cursor:
                    rest.append((cursor, c0))
                out[cause] += c1 - c0
                cursor = c1
            if cursor < y:
                rest.append((cursor, y))
        free = rest
    out["other"] += sum(y - x for x, y in free)


def _ring_full(plans: Sequence[tuple[int, int, int]], retired: Sequence[int]) -> list[Interval]:
    """Intervals in which the waves planned but not retired reached the ring size.

    ``plans``: (plan end ns, wave id, ring size) sorted by time; ``retired``: sorted retire times."""
    events = [(t, +1, ring) for t, _, ring in plans] + [(t, -1, 0) for t in retired]
    events.sort(key=lambda e: (e[0], e[1]))        # a retirement before a plan at the same instant
    out: list[Interval] = []
    in_flight, ring, start = 0, 0, None
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
    return out


def idle_causes(spans: Sequence[Span], num_stages: int, origin: int, end: int,
                inline_admission: bool) -> list[dict[str, float]]:
    """Per stage, seconds of idle time by cause (keys: :data:`CAUSES`) over ``[origin, end]`` (ns)."""
    executes: dict[int, list[tuple[int, int, int]]] = defaultdict(list)   # stage -> (t0, t1, wave or -1)
    prepare: dict[tuple[int, int], Interval] = {}
    sends: dict[tuple[int, int], Interval] = {}
    waits: dict[int, list[Interval]] = defaultdict(list)
    plans: list[tuple[int, int, int]] = []
    rounds: list[Interval] = []
    for sp in spans:
        n, a = sp["n"], sp["a"]
        t0, t1 = sp["t0"] or 0, sp["t1"] or 0
        if n == N.EXECUTE:
            executes[int(a[N.STAGE])].append((t0, t1, int(a.get(N.WAVE_ID, -1))))
        elif n == N.MATERIALIZE and N.WAVE_ID in a:
            prepare[int(a[N.STAGE]), int(a[N.WAVE_ID])] = (t0, t1)
        elif n == N.SEND and N.WAVE_ID in a:
            sends[int(a[N.STAGE]), int(a[N.WAVE_ID])] = (t0, t1)
        elif n == N.STAGE_WAIT:
            waits[int(a[N.STAGE])].append((t0, t1))
        elif n == N.WAVE_PLAN and N.WAVE_ID in a:
            plans.append((t1, int(a[N.WAVE_ID]), int(a.get(N.RING, 0))))
        elif n == N.ADMISSION_ROUND and inline_admission:
            rounds.append((t0, t1))
    plans.sort()
    planned_at = {w: t for t, w, _ in plans}
    last = num_stages - 1
    retired = sorted(t1 for _, t1, _ in executes.get(last, []))
    ring_full = _ring_full(plans, retired)

    out = []
    for s in range(num_stages):
        steps = sorted(e for e in executes.get(s, []) if e[1] > origin)
        counts = dict.fromkeys(CAUSES, 0)
        if not steps:
            counts["fill"] = max(end - origin, 0)
        else:
            counts["fill"] += max(steps[0][0] - origin, 0)
            counts["drain"] += max(end - max(t1 for _, t1, _ in steps), 0)
            busy_until = steps[0][1]
            for t0, t1, w in steps[1:]:
                if t0 > busy_until:
                    _paint(busy_until, t0, _layers(s, w, prepare, sends, waits, rounds, ring_full,
                                                   planned_at), counts)
                busy_until = max(busy_until, t1)
        out.append({c: v / 1e9 for c, v in counts.items()})
    return out


def _layers(s: int, w: int, prepare: dict[tuple[int, int], Interval], sends: dict[tuple[int, int], Interval],
            waits: dict[int, list[Interval]], rounds: list[Interval], ring_full: list[Interval],
            planned_at: dict[int, int]) -> list[tuple[str, Sequence[Interval]]]:
    """The causes that can cover a gap of stage ``s`` before wave ``w``, in priority order."""
    layers: list[tuple[str, Sequence[Interval]]] = [("kv_capacity", waits.get(s, [])),
                                                    ("preparation", [prepare[s, w]] if (s, w) in prepare else [])]
    if s > 0:
        send = sends.get((s - 1, w))
        if send is not None:
            layers += [("transfer", [send]), ("previous_stage", [(0, send[0])])]
        return layers
    layers += [("admission", rounds), ("ring_full", ring_full)]
    if w in planned_at:
        layers.append(("no_work", [(0, planned_at[w])]))
    return layers


def top_causes(causes: dict[str, float], makespan_s: float, k: int = 2) -> str:
    """``"no_work 4.2%, fill 1.9%"``: the largest causes as a share of the makespan."""
    ranked = sorted(((v, c) for c, v in causes.items() if v > 0), reverse=True)[:k]
    return ", ".join(f"{c} {v / makespan_s:.1%}" for v, c in ranked) if makespan_s > 0 else ""


