"""Measuring: a replay's figures and the run's own over the same arrivals - neither the replay's
fill at the start nor its drain at the end (``Replay.margin``) - and after a knob change, the run's
figures since it (:func:`observed_since`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from wavepp.runtime.bench.runs import RunRecord
from wavepp.runtime.figures.report import RunFigures, compute_figures
from wavepp.runtime.whatif.replay import Replay, Span, measured_bounds
from wavepp.telemetry import names as N


def measured_figures(record: RunRecord, replay: Replay, num_stages: int) -> RunFigures:
    """A replay's figures over the arrivals a run's are measured on (``Replay.margin``): not its fill
    at the start nor its drain at the end, which the run it replays did not have."""
    arrived = sorted(s["t0"] for s in record.encoded if s["n"] == N.REQUEST)
    if len(arrived) <= 2 * replay.margin:
        return record.figures
    first, last = measured_bounds(arrived, replay.margin)
    return observed_since(record.encoded, first, num_stages, last, record.meta)


def median_run(runs: Sequence[RunFigures]) -> RunFigures:
    """The figures of the replay whose input throughput is the median (the lower one of the middle
    two for an even count): one replay's figures, consistent with each other, and one replay that
    stalled or ran away does not move them."""
    ranked = sorted(runs, key=lambda f: f.input_tokens_per_s or 0.0)
    return ranked[(len(ranked) - 1) // 2]


def observed_over(spans: Sequence[Span], replay: Replay, num_stages: int) -> RunFigures:
    """What the run itself did over the replayed arrivals (the replay of its current knobs is checked
    against it)."""
    first, last = replay.measured_ns
    return observed_since(spans, first, num_stages, last)


def observed_in(replay: Replay, num_stages: int) -> RunFigures | None:
    """What the run did over the replayed arrivals (None: the replay does not carry the run's spans)."""
    return observed_over(replay.observed, replay, num_stages) if replay.observed else None


def idle_shares(figures: RunFigures) -> dict[str, float]:
    span = (figures.makespan_s or 0.0) * figures.pp
    out: dict[str, float] = {}
    for stage in figures.idle_causes_s:
        for cause, s in stage.items():
            out[cause] = out.get(cause, 0.0) + s
    return {c: s / span for c, s in sorted(out.items(), key=lambda kv: -kv[1]) if span > 0 and s > 0}


# ---- after Apply ----------------------------------------------------------------------------------
def observed_since(spans: Sequence[Span], since_ns: int, num_stages: int, until_ns: int | None = None,
                   meta: Mapping[str, Any] | None = None) -> RunFigures:
    """The run's figures over the requests that arrived at or after ``since_ns`` (a knob change), up to
    ``until_ns`` (None: all since), and every step that started from then until the last of them ended."""
    until = until_ns if until_ns is not None else max((s["t0"] for s in spans), default=0)
    reqs = [s for s in spans if s["n"] == N.REQUEST and since_ns <= s["t0"] <= until]
    origin = min((s["t0"] for s in reqs), default=since_ns)
    end = max((s["t1"] for s in reqs), default=since_ns)
    # A step that runs past the window (a later request's chunk still executing when the last one
    # counted completes) is busy only for its part inside: busy time never exceeds the window it is
    # divided by, so efficiency stays in [0, 1] and no bubble fraction is negative.
    after = reqs + [_clipped(s, origin, end) if s["n"] == N.EXECUTE else s for s in spans
                    if s["n"] != N.REQUEST and since_ns <= s["t0"] <= end]
    base = {"policy": "", "engine": "", "model": "", "hardware": "", "concurrency": 0, "workload": ""}
    return compute_figures(after, num_stages, {**base, **(meta or {})})


def _clipped(span: Span, start_ns: int, end_ns: int) -> Span:
    t0, t1 = max(span["t0"], start_ns), min(span["t1"] or span["t0"], end_ns)
    return span if (t0, t1) == (span["t0"], span["t1"]) else {**span, "t0": t0, "t1": max(t1, t0)}
