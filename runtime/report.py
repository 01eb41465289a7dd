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
* idle causes         = each stage's idle time split by cause (:mod:`runtime.idle_causes`)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from runtime.idle_causes import idle_causes
from telemetry import names as N


def percentile(values: Sequence[float], q: float) -> float | None:
    """Linear-interpolated percentile (``q`` in [0, 100]); None for no values (not a measured 0)."""
    if not values:
        return None
    xs = sorted(values)
    pos = (len(xs) - 1) * q / 100
    lo, hi = math.floor(pos), math.ceil(pos)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


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
    good_hit_rate: float | None    # None when no token was reusable (e.g. a cold workload)
    fallbacks: int
    waves: int
    mean_wave_tokens: float | None
    admission_critical_path_s_per_request: float | None
    idle_causes_s: list[dict[str, float]]     # per stage: seconds idle by cause (they sum to makespan - busy)
    evictions: list[int]                      # per stage: cached blocks evicted to prepare waves

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
    rounds = sorted((s["t1"], _int(s, N.NUM_ADMITTED)) for s in spans if s["n"] == N.ADMISSION_ROUND)
    admitting = [(t, n) for t, n in rounds if n > 0]
    return Cadence([t for t, _ in admitting], [n for _, n in admitting])


def compute_figures(spans: Sequence[Span], num_stages: int, meta: dict[str, Any]) -> RunFigures:
    """Figures of one run from its spans in compact form (``telemetry.span_codec.encode``).

    ``meta`` carries policy, engine, model, hardware, concurrency, workload and inline_admission.
    """
    requests = [s for s in spans if s["n"] == N.REQUEST]
    done = [s for s in requests if "err" not in s]
    executes = [s for s in spans if s["n"] == N.EXECUTE]
    rounds = [s for s in spans if s["n"] == N.ADMISSION_ROUND]

    origin = min((s["t0"] for s in requests), default=0)
    end = max((s["t1"] for s in requests), default=origin)
    makespan = max(end - origin, 0) / 1e9

    busy = [0.0] * num_stages
    computed = 0
    for s in executes:
        stage = _int(s, N.STAGE)
        busy[stage] += _dur(s)
        if stage == 0:
            computed += _int(s, N.TOKENS)
    evictions = [0] * num_stages
    for s in spans:
        if s["n"] == N.MATERIALIZE:
            evictions[_int(s, N.STAGE)] += _int(s, N.EVICTIONS)

    admission_latency = []
    for s in requests:
        t = admitted_event(s)
        if t is not None:
            admission_latency.append((t - s["t0"]) / 1e9)
    cadence = admission_cadence(rounds)
    intervals = cadence.intervals_s

    input_tokens = sum(_int(s, N.GEN_AI_INPUT_TOKENS) for s in done)
    reused = sum(_int(s, N.REUSED_TOKENS) for s in done)
    reusable = sum(_int(s, N.REUSABLE_TOKENS) for s in done)
    latencies = [_dur(s) for s in done]
    fallbacks = sum(1 for s in requests if _int(s, N.FALLBACKS) > 0)
    planned = [_int(s, N.TOKENS) for s in spans if s["n"] == N.WAVE_PLAN]
    wave_tokens = [t for t in planned if t > 0]
    # Admission on the loop's critical path: rounds the dispatcher ran itself (policy flag in meta).
    inline = meta.get("inline_admission", False)
    critical = sum(_dur(s) for s in rounds) if inline else 0.0

    measured = bool(done) and makespan > 0

    def rate(x: float) -> float | None:
        return x / makespan if measured else None

    return RunFigures(
        policy=meta["policy"], engine=meta["engine"], model=meta["model"], hardware=meta["hardware"],
        pp=num_stages, concurrency=meta["concurrency"], workload=meta["workload"],
        requests=len(requests), completed=len(done), failed=len(requests) - len(done),
        input_tokens_per_s=rate(input_tokens), computed_tokens_per_s=rate(computed),
        makespan_s=makespan if measured else None,
        pipeline_efficiency=rate(max(busy, default=0.0)),
        bubble_fraction=[1 - b / makespan for b in busy] if measured else None,
        admission_interval_p50_s=percentile(intervals, 50), admission_interval_p99_s=percentile(intervals, 99),
        admission_rounds=len(cadence.admitted),
        requests_per_round_mean=sum(cadence.admitted) / len(cadence.admitted) if cadence.admitted else None,
        requests_per_round_max=max(cadence.admitted, default=0),
        admission_latency_p50_s=percentile(admission_latency, 50),
        admission_latency_p99_s=percentile(admission_latency, 99),
        prefill_latency_p50_s=percentile(latencies, 50), prefill_latency_p95_s=percentile(latencies, 95),
        prefill_latency_p99_s=percentile(latencies, 99),
        good_hit_rate=reused / reusable if reusable else None,
        fallbacks=fallbacks, waves=len(wave_tokens),
        mean_wave_tokens=sum(wave_tokens) / len(wave_tokens) if wave_tokens else None,
        admission_critical_path_s_per_request=critical / len(done) if done else None,
        idle_causes_s=idle_causes(spans, num_stages, origin, end, inline), evictions=evictions,
    )


def fmt(value: float | None, spec: str, scale: float = 1.0) -> str:
    """A figure for a table: ``-`` where there was nothing to measure (None)."""
    return "-" if value is None else format(value * scale, spec)
