"""What is replayed: the arrivals of a run's recent requests, from its spans (:func:`replay_of`),
and the prompts rebuilt from their shape (:func:`rebuild_trace`).

What a run's spans keep of a request is its arrival, its prompt length, the prefix it shares with
an earlier arrival and which one (``shared_with``, :mod:`runtime.figures.prefix_ledger`), and how much of its
prefix had been computed before it arrived (``reusable``); the token ids are gone. The replay rebuilds
prompts with the same structure (:func:`rebuild_trace`): a request starts with the first ``s`` blocks
of the request it names - in flight or finished, as the run had it: many clients asking about one
document share it while it is computed, which the finished requests alone do not show - or, named
before the window, with a prefix primed before the replay starts; everything after is new. A run saved
without those attributes is rebuilt from ``reusable`` alone: a request whose first ``r`` blocks were
reusable shares them with earlier requests that had the same reusable prefix (the same document,
``reuse90``'s groups), else with an earlier request of exactly ``r`` full blocks (the previous turn
of a conversation), else with a primed prefix. Arrivals replay
through :class:`runtime.sources.traces.TraceWorkload`: at their own offsets for a trace (open loop), or -
for a closed-loop run, whose arrivals were paced by its own completions - as a closed loop of the
run's concurrency (``open_loop=False``: the loop's own closed-loop path, the next request drawn as
one finishes), so a faster setting can show its gain. The path matters in real time: replayed
through the open-loop arrival task instead, a ring=2 run's 8 requests a wave became 5.6 (the next
wave was planned before the round that admitted the returning requests), 16 % off in throughput.

What a closed-loop replay cannot know is how the run's clients were grouped: they return in the
groups their requests finished in, so waves keep the grouping they start with, and the replay starts
from all clients at once. Measured (real time, 400 arrivals): a sim ring=8 window replayed from that
burst formed 68 waves where the run formed 72; opened instead at the window's first arrival times it
formed 116 (each arrival into an idle pipeline is a wave of its own), so the burst stays. A torch
window recorded at ring=1 replayed at ring=4 gives efficiency 0.90-0.97 from the burst (0.99 opened
at the arrival times) where the runtime, switched to ring=4 mid-run, measured 0.94-0.99 in five
runs: the grouping is a spread the run itself has, not a level the replay can fit.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from wavepp.runtime.control.knobs import Knobs
from wavepp.runtime.sources.trace_file import Trace, TraceRow
from wavepp.telemetry import names as N

MIN_ARRIVALS = 16            # fewer requests than this say too little about a setting
# A replay starts with an empty pipeline and ends by draining it; the run it replays was full at both
# ends of the window. So both are measured alike, on the requests that arrived between the first and
# the last few (2 x the concurrency, at most an eighth of the arrivals, at each end) and the steps
# from the first of those arrivals until the last of those requests finished (observed_since).
MEASURE_MARGIN_PER_CLIENT = 2
MEASURE_MARGIN_FRACTION = 8
MAX_ARRIVALS = 400           # the most recent ones are replayed (a preview takes seconds, not minutes)
DEFAULT_WINDOW_S = 60.0

Span = dict[str, Any]


# The error of the whole what-if (this module is the bottom of its imports): a preview that cannot run.
class WhatIfError(ValueError):
    """A preview that cannot run, with the reason in one line (no calibration, too few arrivals …)."""


@dataclass(frozen=True, slots=True)
class Arrival:
    offset_s: float               # after the window's first arrival
    tokens: int                   # prompt length
    reusable_tokens: int          # prefix computed before it arrived (whole blocks)
    done_s: float | None          # when it finished in the observed run (None: failed)
    id: str = ""                  # the run's request id
    shared_tokens: int | None = None   # prefix an earlier-arrived request had too (None: the run did not say)
    shared_with: str = ""         # the first request that arrived with that prefix


@dataclass(frozen=True, slots=True)
class Replay:
    arrivals: tuple[Arrival, ...]
    concurrency: int              # the most requests outstanding (a closed loop's c)
    open_loop: bool               # True: at the arrivals' own offsets (a trace); False: as fast as c allows
    note: str = ""                # which arrivals: "the 212 requests of the last 60 s"
    start_ns: int = 0             # the first and the last one's arrival on the run's span clock
    end_ns: int = 0
    observed: tuple[Span, ...] = ()   # the run's spans from the first arrival on (a real-time replay's fit)

    @property
    def margin(self) -> int:
        """Arrivals left out of the figures at each end of the replay (:func:`measured_figures`)."""
        return min(MEASURE_MARGIN_PER_CLIENT * self.concurrency, len(self.arrivals) // MEASURE_MARGIN_FRACTION)

    @property
    def measured_ns(self) -> tuple[int, int]:
        """The arrivals the figures count, on the run's span clock: from the one after the first
        ``margin`` to the one before the last ``margin``."""
        if not self.arrivals:
            return self.start_ns, self.end_ns
        return measured_bounds([self.start_ns + round(a.offset_s * 1e9) for a in self.arrivals], self.margin)


def measured_bounds(arrived_ns: Sequence[int], margin: int) -> tuple[int, int]:
    """The first and the last arrival counted of these (sorted): ``margin`` in from each end, and
    past every arrival at the very first one's time (a closed loop's opening burst is all fill)."""
    last = arrived_ns[max(len(arrived_ns) - 1 - margin, 0)]
    later = [t for t in arrived_ns[margin:] if t > arrived_ns[0]]
    return (later[0] if later and later[0] <= last else arrived_ns[min(margin, len(arrived_ns) - 1)]), last


def arrivals_from_spans(spans: Sequence[Span], window_s: float | None = DEFAULT_WINDOW_S,
                        limit: int = MAX_ARRIVALS) -> tuple[list[Arrival], str, int]:
    """The requests that arrived in the last ``window_s`` seconds of the spans (None: all), the most
    recent ``limit`` of them, a note saying which, and the first one's arrival (ns). Requests still
    in flight have no span yet."""
    reqs = sorted((s for s in spans if s["n"] == N.REQUEST), key=lambda s: s["t0"])
    if not reqs:
        return [], "no request has finished yet", 0
    end = max(s["t1"] for s in reqs)
    if window_s is not None:
        reqs = [s for s in reqs if s["t0"] >= end - window_s * 1e9]
    note = f"the {len(reqs)} requests of the last {window_s:g} s" if window_s is not None else \
        f"all {len(reqs)} requests"
    if len(reqs) > limit:
        reqs = reqs[-limit:]
        note = f"the {limit} most recent of {note.removeprefix('the ').removeprefix('all ')}"
    origin = reqs[0]["t0"] if reqs else 0
    out = [Arrival((s["t0"] - origin) / 1e9, int(s["a"].get(N.GEN_AI_INPUT_TOKENS, 0)),
                   int(s["a"].get(N.REUSABLE_TOKENS, 0)), None if "err" in s else (s["t1"] - origin) / 1e9,
                   str(s["a"].get(N.REQUEST_ID, "")), _maybe_int(s["a"].get(N.SHARED_PREFIX_TOKENS)),
                   str(s["a"].get(N.SHARED_WITH, "")))
           for s in reqs]
    return [a for a in out if a.tokens > 0], note, origin


def _maybe_int(value: Any) -> int | None:
    return int(value) if isinstance(value, int | float) else None


def max_outstanding(arrivals: Sequence[Arrival]) -> int:
    """The most requests in flight at once (a closed loop's concurrency, when the run does not say)."""
    events = sorted([(a.offset_s, 1) for a in arrivals] + [(a.done_s, -1) for a in arrivals if a.done_s is not None])
    most = current = 0
    for _, step in events:
        current += step
        most = max(most, current)
    return max(most, 1)


def rebuild_trace(arrivals: Sequence[Arrival], block_size: int, open_loop: bool) -> Trace:
    """Prompts of the arrivals' lengths and shared prefixes, as a trace of block ids (module doc)."""
    if arrivals and all(a.shared_tokens is not None for a in arrivals):
        return _rebuild_shared(arrivals, block_size, open_loop)
    next_id = 0

    def fresh(n: int) -> tuple[int, ...]:
        nonlocal next_id
        next_id += n
        return tuple(range(next_id - n, next_id))

    by_reusable: dict[int, tuple[int, ...]] = {}          # reusable blocks -> the shared prefix
    finished: dict[int, tuple[int, ...]] = {}             # full blocks -> a finished request's first blocks
    pending: list[tuple[float, int, tuple[int, ...]]] = []   # (done, full blocks, ids) not yet finished
    primed: list[tuple[int, ...]] = []
    rows = []
    for i, a in enumerate(arrivals):
        for _, full, ids in sorted(p for p in pending if p[0] <= a.offset_s):   # the latest wins
            finished[full] = ids[:full]
        pending = [p for p in pending if p[0] > a.offset_s]
        blocks = -(-a.tokens // block_size)
        r = min(a.reusable_tokens // block_size, (a.tokens - 1) // block_size)
        prefix: tuple[int, ...] = ()
        if r > 0:
            prefix = by_reusable.get(r) or finished.get(r) or ()
            if not prefix:
                prefix = fresh(r)
                primed.append(prefix)
            by_reusable[r] = prefix
        ids = prefix + fresh(blocks - len(prefix))
        if a.done_s is not None:
            pending.append((a.done_s, a.tokens // block_size, ids))
        rows.append(TraceRow(i + 1, a.offset_s if open_loop else 0.0, a.tokens, ids))
    return Trace("(replay)", rows, block_tokens=block_size, primed=tuple(primed))


def _rebuild_shared(arrivals: Sequence[Arrival], block_size: int, open_loop: bool) -> Trace:
    """The run's own prefix structure: each request starts with the first ``shared_tokens`` of the
    request it names (``shared_with``) - finished, or still computing them when it arrived, as the
    run had it - or, for one that arrived before the window, with a prefix primed before the replay
    (as long as the longest any request of the window shares with it)."""
    next_id = 0

    def fresh(n: int) -> list[int]:
        nonlocal next_id
        next_id += n
        return list(range(next_id - n, next_id))

    ids_of: dict[str, tuple[int, ...]] = {}
    primed: dict[str, list[int]] = {}
    rows = []
    for i, a in enumerate(arrivals):
        blocks = -(-a.tokens // block_size)
        s = min((a.shared_tokens or 0) // block_size, (a.tokens - 1) // block_size)
        prefix: list[int] = []
        if s > 0:
            owner = ids_of.get(a.shared_with)
            if owner is not None and len(owner) >= s:
                prefix = list(owner[:s])
            else:
                before = primed.setdefault(a.shared_with or f"(unnamed {s})", [])
                before += fresh(s - len(before)) if s > len(before) else []
                prefix = before[:s]
        ids = tuple(prefix + fresh(blocks - len(prefix)))
        ids_of[a.id or f"(row {i})"] = ids
        rows.append(TraceRow(i + 1, a.offset_s if open_loop else 0.0, a.tokens, ids))
    return Trace("(replay)", rows, block_tokens=block_size, primed=tuple(tuple(p) for p in primed.values()))


def check_replay(replay: Replay) -> None:
    if len(replay.arrivals) < MIN_ARRIVALS:
        raise WhatIfError(f"too few arrivals to replay: {replay.note or f'{len(replay.arrivals)} requests'}; "
                          f"a preview needs at least {MIN_ARRIVALS} (widen the window or wait for more)")


# ---- from a run's record ----------------------------------------------------------------------------
def replay_of(spans: Sequence[Span], meta: Mapping[str, Any], window_s: float | None = DEFAULT_WINDOW_S) -> Replay:
    """The arrivals to replay from a run's spans; its concurrency and loop kind from ``meta`` (a
    saved run's, or what a live source knows), else estimated from the spans."""
    arrivals, note, start = arrivals_from_spans(spans, window_s)
    concurrency = int(meta.get("concurrency") or 0) or max_outstanding(arrivals)
    end = start + round(arrivals[-1].offset_s * 1e9) if arrivals else start
    observed = tuple(s for s in spans if s["t0"] >= start) if arrivals else ()
    return Replay(tuple(arrivals), concurrency, str(meta.get("workload", "")).startswith("trace:"), note, start, end,
                  observed)


def knobs_at_end(meta: Mapping[str, Any], knob_changes: Sequence[Mapping[str, Any]]) -> Knobs:
    """The knobs a saved run ended with: its starting knobs and every change it recorded."""
    from wavepp.runtime.control.knobs import KnobError, from_changes
    values = dict(meta.get("knobs") or {})
    for change in knob_changes:
        values.update(change.get("changes") or {})
    try:
        return from_changes(values, {})
    except KnobError as exc:
        raise WhatIfError(f"the run's knobs are not valid: {exc}") from None
