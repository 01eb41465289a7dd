"""The figures of DESIGN §7, computed from a run's spans - the one source of truth.

* input throughput    = Σ prompt tokens of completed requests / makespan
* computed throughput = Σ tokens executed on stage 0 (everything that entered the model,
                        including work a late fallback threw away) / makespan
* makespan            = first arrival -> last completion
* busy_s              = Σ execute-span time on stage s; bubble fraction = 1 - busy_s / makespan
* pipeline efficiency = max_s busy_s / makespan
* admission cadence   = intervals between the ends of consecutive admission rounds that admitted
                        something (the rhythm at which the pipeline gets admitted work: the same on
                        the wall clock and in virtual time for the same schedule); None when fewer
                        than two rounds admitted anything. Requests per round apart.
* admission latency   = arrival -> admitted
* good-hit rate       = reused tokens / tokens a completed request had computed before
* prefill latency     = arrival -> last chunk done (request span duration)
* fallbacks           = requests whose reuse boundary was lowered after the first lookup
* evictions           = per stage, cached blocks evicted to prepare waves (materialize spans)
* idle causes         = each stage's idle time split by cause (:mod:`runtime.figures.idle_causes`)
* recomputation       = per stage, busy time on chunks that a later late fallback of their
                        request discarded (:mod:`runtime.figures.recomputation`)
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from wavepp.runtime.figures.idle_causes import IdleInterval, IdleTracker, sums
from wavepp.runtime.figures.idle_settle import SettlingIdle
from wavepp.runtime.figures.recomputation import RecomputeTracker
from wavepp.runtime.figures.sample_ring import SampleRing
from wavepp.telemetry import names as N
from wavepp.telemetry.reuse_split import token_split


def percentile(values: Sequence[float], q: float) -> float | None:
    """Linear-interpolated percentile (``q`` in [0, 100]); None for no values (not a measured 0)."""
    return percentiles(values, (q,))[0]


def percentiles(values: Sequence[float] | SampleRing, qs: Sequence[float]) -> list[float | None]:
    """:func:`percentile` of each ``q``, the values sorted once (a live view's figures sort up to 100,000 of
    them a second)."""
    if not values:
        return [None for _ in qs]
    # A ring is sorted by numpy (its Python floats, sorted, took several times as long at 100,000).
    if isinstance(values, SampleRing):
        ring = values.values()                  # a copy: sorted in place
        ring.sort()
        xs: list[float] = ring.tolist()
    else:
        xs = sorted(values)
    out: list[float | None] = []
    for q in qs:
        pos = (len(xs) - 1) * q / 100
        lo, hi = math.floor(pos), math.ceil(pos)
        out.append(xs[lo] + (xs[hi] - xs[lo]) * (pos - lo))
    return out


@dataclass(slots=True)
class RunFigures:
    policy: str
    engine: str
    model: str
    hardware: str
    pp: int
    concurrency: int
    workload: str
    requests: int
    completed: int
    failed: int
    # None (null in JSON) where there is nothing to measure: a run in which no request completed has
    # no makespan, hence no rates; no admission or completion, no latency.
    input_tokens_per_s: float | None
    computed_tokens_per_s: float | None
    makespan_s: float | None
    pipeline_efficiency: float | None
    bubble_fraction: list[float] | None
    admission_interval_p50_s: float | None   # None: fewer than two admitting rounds (no interval)
    admission_interval_p99_s: float | None
    admission_rounds: int                    # rounds that admitted at least one request
    requests_per_round_mean: float | None    # None: no round admitted anything
    requests_per_round_max: int
    admission_latency_p50_s: float | None
    admission_latency_p99_s: float | None
    prefill_latency_p50_s: float | None
    prefill_latency_p95_s: float | None
    prefill_latency_p99_s: float | None
    # reused tokens a completed request had computed / such reusable tokens (<= 1); None: nothing reusable
    good_hit_rate: float | None
    fallbacks: int
    waves: int
    mean_wave_tokens: float | None
    admission_critical_path_s_per_request: float | None
    idle_causes_s: list[dict[str, float]]     # per stage: seconds idle by cause (they sum to makespan - busy)
    evictions: list[int]                      # per stage: cached blocks evicted to prepare waves
    recompute_s: list[float]                  # per stage: busy seconds on chunks a late fallback discarded
    # Why the run ended before its requests did (None: it did not): a stall the deadlock guard caught,
    # or the point where the policy's source would stop (its figures are the run's up to there).
    stalled: str | None = None
    # prompt tokens taken from a request computing them at the same time / prompt tokens (beside good-hit)
    sharing_in_flight: float | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


Span = dict[str, Any]       # the compact form of telemetry.span_codec: n, t0, t1, a, ev, err


def _dur(span: Span) -> float:
    """Span duration in seconds; nanosecond integers are subtracted before converting (a double
    holds an absolute epoch timestamp only to ~0.24 us)."""
    return ((span["t1"] or 0) - (span["t0"] or 0)) / 1e9


def _int(span: Span, key: str) -> int:
    value = span["a"].get(key, 0)
    return int(value) if isinstance(value, int | float) else 0


def admitted_event(span: Span) -> int | None:
    """Timestamp (ns) of the request's last admission, if it was admitted."""
    times: list[int] = [e[1] for e in span.get("ev", ()) if e[0] == N.EVENT_ADMITTED]
    return times[-1] if times else None


@dataclass(frozen=True, slots=True)
class Cadence:
    """Admission rounds that admitted something: when each ended (ns, sorted) and how many it admitted."""
    ends_ns: list[int]
    admitted: list[int]

    @property
    def intervals_s(self) -> list[float]:
        return [(b - a) / 1e9 for a, b in zip(self.ends_ns, self.ends_ns[1:], strict=False)]


def admission_cadence(spans: Sequence[Span]) -> Cadence:
    """The round, not the request, is the unit: a round stamps its requests one by one (microseconds
    apart on the wall clock, at one instant in virtual time), so per-request instants would measure
    the stamping loop instead of the pipeline's rhythm."""
    return _cadence([(s["t1"], _int(s, N.NUM_ADMITTED)) for s in spans if s["n"] == N.ADMISSION_ROUND])


def _cadence(rounds: Iterable[tuple[int, int]] | SampleRing) -> Cadence:
    """``rounds``: (end ns, requests admitted) of every admission round, in any order."""
    if isinstance(rounds, SampleRing):      # sorted by numpy as tuples sort (end, then count): 100,000 rounds
        rows = rounds.values()                  # ~7 ms, where their Python tuples took ~50 ms
        rows = rows[rows[:, 1] > 0]
        rows = rows[np.lexsort((rows[:, 1], rows[:, 0]))]
        return Cadence(rows[:, 0].tolist(), rows[:, 1].tolist())
    admitting = [(t, n) for t, n in sorted(rounds) if n > 0]
    return Cadence([t for t, _ in admitting], [n for _, n in admitting])


class FigureAccumulator:
    """Every figure of :class:`RunFigures`, kept up to date as spans arrive (:meth:`add`): the one
    aggregator behind the bench (and the idle seconds it hands the metrics) and the dashboard. An update costs the new
    spans; what it holds is counters, sums and one number per request or admitting round (exact
    percentiles need the values), never the spans themselves - the stage steps its idle split needs
    are small tuples (:class:`IdleTracker`). :meth:`figures` gives exactly what ``compute_figures``
    of all the spans added gives; a span that ended after the run's first source halt is ignored,
    as the whole-run report ignores it (spans arrive in the order they end).

    ``samples_held``: keep the per-request values of only the newest that many requests (and admitting
    rounds) - a live view that runs for days; its percentiles are then those of the newest (counts, sums
    and means still cover the run: :attr:`samples_dropped` says how many values went). None (the bench,
    a saved run): every value, exact percentiles of the whole run.

    ``settle_stages``: the run's number of stages, to split its idle time as the gaps settle (a run
    seen once, whose spans arrive in the order they end: the bench); the idle split of the whole run
    is then held as sums, not intervals (:mod:`runtime.figures.idle_settle`), and :meth:`idle_intervals`
    answers only the gaps still open. None: every step is kept (a live view splits its window again)."""

    def __init__(self, samples_held: int | None = None, settle_stages: int | None = None) -> None:
        def samples(width: int = 1) -> SampleRing:
            return SampleRing(samples_held) if width == 1 else SampleRing(samples_held, np.int64, width)

        self.policy: str | None = None                      # the first request span's policy
        self.num_spans = 0                                  # spans added (those after a halt too)
        self.num_requests = 0
        self.num_completed = 0
        self.num_admitted = 0                               # requests whose span says when they were admitted
        self.origin: int | None = None                      # first arrival (ns)
        self.last_done: int | None = None                   # last request span's end (ns)
        self.admission_latency = samples()                  # seconds, of admitted requests
        self.latencies = samples()                          # prefill latency of completed ones
        self.tokens = [0, 0, 0, 0]        # completed: input, reused from completed requests, reusable, in flight
        self.fallbacks = 0                                  # requests whose reuse boundary was lowered
        self.busy: dict[int, float] = defaultdict(float)   # stage -> execute seconds (summed in span order)
        self.computed = 0                                   # tokens executed on stage 0
        self.evictions: dict[int, int] = defaultdict(int)
        self.rounds = samples(2)                            # (end ns, admitted) a round
        self.num_rounds = 0                                 # admitting rounds, and the requests they admitted
        self.admitted = 0
        self.admitted_max = 0
        self.critical_s = 0.0                               # Σ durations of rounds the loop waited for
        self.num_waves = 0                                  # waves planned with tokens
        self.wave_tokens = 0                                # their tokens
        self.halt: tuple[int, str] | None = None            # the first source halt (ns, why)
        self.settling = SettlingIdle(settle_stages) if settle_stages is not None else None
        self.idle = self.settling.tracker if self.settling is not None else IdleTracker()
        self.recompute = RecomputeTracker()

    def add(self, spans: Sequence[Span]) -> FigureAccumulator:
        self.num_spans += len(spans)
        halted = next((i for i, s in enumerate(spans) if s["n"] == N.REQUEST and _halt(s) is not None), None)
        if halted is not None or self.halt is not None:
            return self._add_halting(spans)
        for s in spans:
            self._one(s)
        self._add_idle(spans)
        self.recompute.add(spans)
        return self

    def _add_idle(self, spans: Sequence[Span]) -> None:
        if self.settling is not None:
            self.settling.add(spans, self.origin)
        else:
            self.idle.add(spans)

    def _add_halting(self, spans: Sequence[Span]) -> FigureAccumulator:
        """Span by span: from the first halt on, only spans that ended by it count."""
        for s in spans:
            halt = _halt(s) if s["n"] == N.REQUEST else None
            if halt is not None and (self.halt is None or halt < self.halt):
                self.halt = halt
            if self.halt is not None and (s["t1"] or 0) > self.halt[0]:
                continue
            self._one(s)
            self._add_idle((s,))
            self.recompute.add((s,))
        return self

    def _one(self, s: Span) -> None:
        n = s["n"]
        if n == N.REQUEST:
            self._request(s)
        elif n == N.EXECUTE:
            stage = _int(s, N.STAGE)
            self.busy[stage] += _dur(s)
            if stage == 0:
                self.computed += _int(s, N.TOKENS)
        elif n == N.MATERIALIZE:
            self.evictions[_int(s, N.STAGE)] += _int(s, N.EVICTIONS)
        elif n == N.ADMISSION_ROUND:
            admitted = _int(s, N.NUM_ADMITTED)
            if admitted > 0:
                self.rounds.append((s["t1"], admitted))
                self.num_rounds += 1
                self.admitted += admitted
                self.admitted_max = max(self.admitted_max, admitted)
            if s["a"].get(N.ADMISSION_CRITICAL):
                self.critical_s += _dur(s)
        elif n == N.WAVE_PLAN:
            tokens = _int(s, N.TOKENS)
            if tokens > 0:
                self.num_waves += 1
                self.wave_tokens += tokens

    def _request(self, s: Span) -> None:
        if self.policy is None:
            self.policy = str(s["a"].get(N.POLICY, ""))
        self.num_requests += 1
        self.origin = s["t0"] if self.origin is None else min(self.origin, s["t0"])
        self.last_done = s["t1"] if self.last_done is None else max(self.last_done, s["t1"])
        t = admitted_event(s)
        if t is not None:
            self.num_admitted += 1
            self.admission_latency.append((t - s["t0"]) / 1e9)
        self.fallbacks += _int(s, N.FALLBACKS) > 0
        if "err" not in s:
            self.num_completed += 1
            self.latencies.append(_dur(s))
            split = token_split(_int(s, N.GEN_AI_INPUT_TOKENS), _int(s, N.REUSED_TOKENS), _int(s, N.REUSABLE_TOKENS))
            for i, n in enumerate(split):
                self.tokens[i] += n

    @property
    def samples_dropped(self) -> int:
        """Per-request values (and rounds) no longer held (``samples_held``): 0 while every one is."""
        return max(self.num_completed - len(self.latencies), self.num_rounds - len(self.rounds),
                   self.num_admitted - len(self.admission_latency))

    def window(self) -> tuple[int, int]:
        """The makespan's ends (ns): first arrival, last completion."""
        origin = self.origin if self.origin is not None else 0
        return origin, self.last_done if self.last_done is not None else origin

    def idle_intervals(self, num_stages: int) -> list[IdleInterval]:
        origin, end = self.window()
        return self.idle.intervals(num_stages, origin, end)

    def figures(self, num_stages: int, meta: dict[str, Any],
                intervals: Sequence[IdleInterval] | None = None, stalled: str | None = None) -> RunFigures:
        """``intervals``: this run's idle intervals when the caller already has them; ``stalled``: why the
        run ended early."""
        origin, end = self.window()
        makespan = max(end - origin, 0) / 1e9
        busy = [self.busy.get(stage, 0.0) for stage in range(num_stages)]
        evictions = [self.evictions.get(stage, 0) for stage in range(num_stages)]

        admission_p50, admission_p99 = percentiles(self.admission_latency, (50, 99))
        interval_p50, interval_p99 = percentiles(_cadence(self.rounds).intervals_s, (50, 99))
        latency_p50, latency_p95, latency_p99 = percentiles(self.latencies, (50, 95, 99))

        input_tokens, reused, reusable, in_flight = self.tokens
        # Admission on the loop's critical path: rounds the dispatcher ran itself (their spans say so).
        critical = self.critical_s
        if intervals is not None:
            idle = sums(intervals, num_stages)
        elif self.settling is not None:
            if self.settling.num_stages != num_stages:
                raise ValueError(f"figures of {num_stages} stages from an aggregator settling "
                                 f"{self.settling.num_stages}")
            idle = self.settling.sums(origin, end)
        else:
            idle = sums(self.idle.intervals(num_stages, origin, end), num_stages)

        completed = self.num_completed
        measured = completed > 0 and makespan > 0

        def rate(x: float) -> float | None:
            return x / makespan if measured else None

        return RunFigures(
            policy=meta["policy"], engine=meta["engine"], model=meta["model"], hardware=meta["hardware"],
            pp=num_stages, concurrency=meta["concurrency"], workload=meta["workload"],
            requests=self.num_requests, completed=completed, failed=self.num_requests - completed,
            input_tokens_per_s=rate(input_tokens), computed_tokens_per_s=rate(self.computed),
            makespan_s=makespan if measured else None,
            pipeline_efficiency=rate(max(busy, default=0.0)),
            bubble_fraction=[1 - b / makespan for b in busy] if measured else None,
            admission_interval_p50_s=interval_p50, admission_interval_p99_s=interval_p99,
            admission_rounds=self.num_rounds,
            requests_per_round_mean=self.admitted / self.num_rounds if self.num_rounds else None,
            requests_per_round_max=self.admitted_max,
            admission_latency_p50_s=admission_p50, admission_latency_p99_s=admission_p99,
            prefill_latency_p50_s=latency_p50, prefill_latency_p95_s=latency_p95, prefill_latency_p99_s=latency_p99,
            good_hit_rate=reused / reusable if reusable else None,
            fallbacks=self.fallbacks, waves=self.num_waves,
            mean_wave_tokens=self.wave_tokens / self.num_waves if self.num_waves else None,
            admission_critical_path_s_per_request=critical / completed if completed else None,
            idle_causes_s=idle, evictions=evictions,
            recompute_s=self.recompute.seconds(num_stages),
            stalled=stalled or (self.halt[1] if self.halt is not None else None),
            sharing_in_flight=in_flight / input_tokens if input_tokens else None,
        )


def compute_figures(spans: Sequence[Span], num_stages: int, meta: dict[str, Any],
                    stalled: str | None = None) -> RunFigures:
    """Figures of one run from its spans in compact form (``telemetry.span_codec.encode``).

    ``meta`` carries policy, engine, model, hardware, concurrency and workload; ``stalled``: the run
    ended early (its diagnosis). Where a request span carries ``wavepp.source_halt`` (a baseline's
    source would stop the whole run there: :mod:`runtime.mechanisms.stage_admission`), the figures
    are those of the spans that ended by the first such point, and ``stalled`` says why.
    """
    halt = source_halt(spans)
    if halt is not None:
        t, reason = halt
        spans = [s for s in spans if (s["t1"] or 0) <= t]
        stalled = stalled or reason
    return FigureAccumulator().add(spans).figures(num_stages, meta, stalled=stalled)


def source_halt(spans: Sequence[Span]) -> tuple[int, str] | None:
    """The first point (ns) where the policy's source would have stopped the run, and why."""
    halts = [h for s in spans if s["n"] == N.REQUEST and (h := _halt(s)) is not None]
    return min(halts) if halts else None


def _halt(span: Span) -> tuple[int, str] | None:
    """The first source halt a request span carries (ns, why), if any."""
    halts = [(int(t), str(a.get(N.ERROR, ""))) for name, t, a in span.get("ev", ()) if name == N.EVENT_HALT]
    return min(halts) if halts else None


def fmt(value: float | None, spec: str, scale: float = 1.0) -> str:
    """A figure for a table: ``-`` where there was nothing to measure (None)."""
    return "-" if value is None else format(value * scale, spec)
