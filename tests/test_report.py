"""Figures of DESIGN §7 computed from spans: percentiles and every figure on a hand-built run."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Status, StatusCode, Tracer

from wavepp.runtime.figures.report import compute_figures, percentile
from wavepp.telemetry import names as N
from wavepp.telemetry.setup import SIM_EPOCH_NS
from wavepp.telemetry.span_codec import encode

META = {"policy": "wavepp", "engine": "sim", "model": "m", "hardware": "h", "concurrency": 4, "workload": "w"}


# ---- percentile --------------------------------------------------------------------------------

def test_percentile_of_nothing_is_none() -> None:
    """No values: None (null in JSON, "-" in the table), never a measured-looking 0."""
    assert percentile([], 50) is None


@pytest.mark.parametrize(("values", "q", "expected"), [
    ([5.0], 0, 5.0), ([5.0], 99, 5.0),
    ([1, 2, 3, 4], 50, 2.5),          # pos 1.5 between 2 and 3
    ([4, 3, 2, 1], 50, 2.5),          # order of input does not matter
    ([1, 2, 3, 4], 25, 1.75),         # pos 0.75
    ([1, 2, 3, 4], 0, 1.0), ([1, 2, 3, 4], 100, 4.0),
    ([0, 10], 99, 9.9),
    ([1, 1, 1, 100], 50, 1.0),
    ([10, 20, 30, 40, 50], 95, 48.0),  # pos 3.8 -> 40 + 0.8 * 10
])
def test_percentile_hand_values(values: list[float], q: float, expected: float) -> None:
    """Linear interpolation between closest ranks: pos = (n-1)·q/100."""
    assert percentile(values, q) == pytest.approx(expected)


@given(st.lists(st.floats(-1e6, 1e6), min_size=1, max_size=30), st.floats(0, 100), st.floats(0, 100))
def test_percentile_monotone_and_bounded(values: list[float], q1: float, q2: float) -> None:
    """Between min and max, and non-decreasing in q."""
    lo, hi = sorted((q1, q2))
    a, b = percentile(values, lo), percentile(values, hi)
    assert min(values) - 1e-6 <= a <= b + 1e-6 and b <= max(values) + 1e-6


# ---- compute_figures on synthetic spans ------------------------------------------------------

class Run:
    """Finished spans stamped at explicit times (seconds after the sim epoch)."""

    def __init__(self, epoch_ns: int = SIM_EPOCH_NS) -> None:
        self.epoch = epoch_ns
        self.exporter = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.tracer: Tracer = provider.get_tracer("test")

    def ns(self, t: float) -> int:
        return self.epoch + round(t * 1e9)

    def span(self, name: str, start: float, end: float, attrs: dict[str, Any] | None = None,
             admitted: float | None = None, error: bool = False) -> None:
        s = self.tracer.start_span(name, attributes=attrs, start_time=self.ns(start))
        if admitted is not None:
            s.add_event(N.EVENT_ADMITTED, timestamp=self.ns(admitted))
        if error:
            s.set_status(Status(StatusCode.ERROR, "failed"))
        s.end(end_time=self.ns(end))

    def request(self, start: float, end: float, tokens: int, reused: int = 0, reusable: int = 0,
                fallbacks: int = 0, admitted: float | None = None, error: bool = False) -> None:
        self.span(N.REQUEST, start, end, {N.GEN_AI_INPUT_TOKENS: tokens, N.REUSED_TOKENS: reused,
                                          N.REUSABLE_TOKENS: reusable, N.FALLBACKS: fallbacks},
                  admitted, error)

    def execute(self, stage: int, start: float, end: float, tokens: int) -> None:
        self.span(N.EXECUTE, start, end, {N.STAGE: stage, N.TOKENS: tokens})

    @property
    def spans(self) -> list[dict[str, Any]]:
        """The compact form the figures are computed from (as the bench and the dashboard do)."""
        return [encode(s) for s in self.exporter.get_finished_spans()]


def hand_run(inline: bool = False) -> Run:
    """Two stages, four completed and two failed requests (times in seconds); ``inline``: the loop
    ran the admission rounds itself (their spans say so)."""
    run = Run()
    #            start  end  tokens reused reusable fallbacks admitted
    run.request(0.00, 1.0, 1000, 512, 512, 0, admitted=0.1)
    run.request(0.04, 2.0, 2000, 0, 1024, 1, admitted=0.1)     # same round as the first: same instant
    run.request(0.50, 3.0, 3000, 1024, 1024, 2, admitted=0.6)  # two fallbacks: still one request
    run.request(1.10, 2.9, 1200, 0, 0, 0, admitted=1.2)
    run.request(0.50, 2.5, 500, 0, 0, 0, admitted=0.6, error=True)   # failed after admission
    run.request(0.20, 0.3, 700, error=True)                         # failed before admission
    run.execute(0, 0.1, 0.6, 1000)
    run.execute(0, 0.6, 1.6, 2000)
    run.execute(1, 0.6, 1.1, 1000)     # stage 1 runs the same tokens: not counted again
    run.execute(1, 1.6, 2.8, 2000)
    for start, tokens in ((0.1, 3000), (0.6, 1000), (1.0, 0), (1.6, 1200)):
        run.span(N.WAVE_PLAN, start, start + 0.001, {N.TOKENS: tokens})
    for t, admitted in ((0.1, 2), (0.6, 2), (0.9, 0), (1.2, 1)):      # the 0.9 round admitted nothing
        run.span(N.ADMISSION_ROUND, t - 0.05, t, {N.NUM_ADMITTED: admitted, N.ADMISSION_CRITICAL: inline})
    return run


def test_figures_on_hand_built_run() -> None:
    """Every §7 figure equals its hand-computed value."""
    f = compute_figures(hand_run().spans, 2, META)
    approx = pytest.approx
    assert (f.requests, f.completed, f.failed, f.pp) == (6, 4, 2, 2)
    assert f.makespan_s == approx(3.0, abs=1e-6)                       # first arrival 0.0 -> last end 3.0
    assert f.input_tokens_per_s == approx(7200 / 3.0, rel=1e-6)        # completed prompts only
    assert f.computed_tokens_per_s == approx(3000 / 3.0, rel=1e-6)     # stage 0 tokens
    # busy: stage 0 = 0.5 + 1.0 = 1.5 s, stage 1 = 0.5 + 1.2 = 1.7 s
    assert f.bubble_fraction == approx([1 - 1.5 / 3, 1 - 1.7 / 3], abs=1e-6)
    assert f.pipeline_efficiency == approx(1.7 / 3, abs=1e-6)
    # ends of the rounds that admitted something {0.1, 0.6, 1.2}: intervals [0.5, 0.6]
    assert f.admission_interval_p50_s == approx(0.55, abs=1e-6)
    assert f.admission_interval_p99_s == approx(0.599, abs=1e-6)
    assert (f.admission_rounds, f.requests_per_round_mean, f.requests_per_round_max) == (3, approx(5 / 3), 2)
    # admission latencies 0.1, 0.06, 0.1, 0.1 (+0.1 for the failed one)
    assert f.admission_latency_p50_s == approx(0.1, abs=1e-6)
    assert f.admission_latency_p99_s == approx(0.1, abs=1e-6)
    # prefill latencies of completed requests: sorted [1.0, 1.8, 1.96, 2.5]
    assert f.prefill_latency_p50_s == approx(1.88, abs=1e-6)
    assert f.prefill_latency_p95_s == approx(1.96 + 0.85 * 0.54, abs=1e-6)
    assert f.prefill_latency_p99_s == approx(1.96 + 0.97 * 0.54, abs=1e-6)
    assert f.good_hit_rate == approx(1536 / 2560)                     # 0.6
    assert f.fallbacks == 2
    assert f.waves == 3 and f.mean_wave_tokens == approx(5200 / 3)     # the empty plan is not a wave
    assert f.admission_critical_path_s_per_request == 0.0             # async admission


def test_inline_admission_is_on_the_critical_path() -> None:
    """With inline admission the rounds' time (4 x 0.05 s) is charged per completed request (4)."""
    f = compute_figures(hand_run(inline=True).spans, 2, META)
    assert f.admission_critical_path_s_per_request == pytest.approx(0.2 / 4, abs=1e-6)


def test_meta_and_dict() -> None:
    """Meta fields pass through; as_dict is JSON-ready with a per-stage bubble list."""
    d = compute_figures(hand_run().spans, 2, META).as_dict()
    assert {k: d[k] for k in META} == META
    assert isinstance(d["bubble_fraction"], list) and len(d["bubble_fraction"]) == 2


def test_idle_stage_has_full_bubble() -> None:
    """A stage with no execute span is all bubble; the busy one sets pipeline efficiency."""
    run = Run()
    run.request(0.0, 2.0, 100, admitted=0.0)
    run.execute(0, 0.0, 1.5, 100)
    f = compute_figures(run.spans, 3, META)
    assert f.bubble_fraction == pytest.approx([0.25, 1.0, 1.0], abs=1e-6)
    assert f.pipeline_efficiency == pytest.approx(0.75, abs=1e-6)
    assert f.admission_interval_p50_s is None                         # no admitting round: no interval


def test_no_reusable_tokens_gives_no_good_hit_rate() -> None:
    """A cold run (nothing reusable) reports good_hit_rate None, not 0 or a division error."""
    run = Run()
    run.request(0.0, 1.0, 100, reused=0, reusable=0, admitted=0.1)
    assert compute_figures(run.spans, 1, META).good_hit_rate is None


def test_no_spans() -> None:
    """An empty run gives nulls, not zeros nor division errors."""
    f = compute_figures([], 2, META)
    assert (f.requests, f.makespan_s, f.input_tokens_per_s, f.pipeline_efficiency) == (0, None, None, None)
    assert f.bubble_fraction is None and f.good_hit_rate is None


def test_a_run_with_no_completion_has_null_figures() -> None:
    """Every request failed: the counts say so, and no rate or latency pretends to be a measured 0."""
    run = Run()
    run.request(0.0, 1.0, 100, admitted=0.1, error=True)
    run.request(0.0, 2.0, 100, error=True)
    run.execute(0, 0.2, 0.6, 100)
    f = compute_figures(run.spans, 1, META)
    assert (f.requests, f.completed, f.failed) == (2, 0, 2)
    assert all(v is None for v in (f.input_tokens_per_s, f.computed_tokens_per_s, f.makespan_s, f.pipeline_efficiency,
                                   f.bubble_fraction, f.prefill_latency_p50_s, f.prefill_latency_p99_s,
                                   f.admission_critical_path_s_per_request))
    assert f.admission_latency_p50_s == pytest.approx(0.1)        # it was admitted: that was measured


def test_microsecond_durations_are_exact_at_the_sim_epoch() -> None:
    """A 2 us request with a 1 us execute step reports makespan 2 us and latency 2 us (to 0.1%)."""
    run = Run()
    run.request(0.0, 2e-6, 64, admitted=1e-6)
    run.execute(0, 0.0, 1e-6, 64)
    f = compute_figures(run.spans, 1, META)
    assert f.makespan_s == pytest.approx(2e-6, rel=1e-3)
    assert f.prefill_latency_p50_s == pytest.approx(2e-6, rel=1e-3)
    assert f.admission_latency_p50_s == pytest.approx(1e-6, rel=1e-3)


def rounds_run(stamp_gap_s: float) -> Run:
    """Three rounds of four requests, 50 ms apart; a round stamps its requests ``stamp_gap_s`` apart
    (0 in virtual time; microseconds on the wall clock, where the stamping loop takes real time)."""
    run = Run()
    for i, end in enumerate((0.10, 0.15, 0.20)):
        run.span(N.ADMISSION_ROUND, end - 0.01, end, {N.NUM_ADMITTED: 4})
        for j in range(4):
            run.request(0.0, 1.0 + i, 100, admitted=end + j * stamp_gap_s)
    return run


def test_cadence_is_the_same_on_the_wall_clock_and_in_virtual_time() -> None:
    """Cadence is the rhythm of admitting rounds (50 ms here), not the microseconds between the
    admission stamps of one round's requests (today's p50 read 0.00 ms on every real-time run)."""
    virtual = compute_figures(rounds_run(0.0).spans, 1, META)
    wall = compute_figures(rounds_run(3e-6).spans, 1, META)
    for f in (virtual, wall):
        assert f.admission_interval_p50_s == pytest.approx(0.05, abs=1e-9)
        assert f.admission_interval_p99_s == pytest.approx(0.05, abs=1e-9)
        assert (f.admission_rounds, f.requests_per_round_mean, f.requests_per_round_max) == (3, 4.0, 4)


def test_a_run_too_short_for_a_cadence_says_so() -> None:
    """One admitting round has no interval: the figures are None (JSON null, "-" in the table), not 0."""
    run = Run()
    run.request(0.0, 1.0, 100, admitted=0.1)
    run.span(N.ADMISSION_ROUND, 0.05, 0.1, {N.NUM_ADMITTED: 1})
    f = compute_figures(run.spans, 1, META)
    assert f.admission_interval_p50_s is None and f.admission_interval_p99_s is None
    assert (f.admission_rounds, f.requests_per_round_mean) == (1, 1.0)
