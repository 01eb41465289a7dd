"""Time-equalized packing: the timed chunking's planner (runtime/planning/timed.py)."""

from __future__ import annotations

import pytest

from tests.test_planner import B, adm
from wavepp.runtime.planning.planner import MpuBudget, MpuPlanner, scheduled
from wavepp.runtime.planning.step_times import StageFit, StepTimes, features, fit
from wavepp.runtime.planning.timed import (
    TimedPlanner,
    bottleneck,
    pack_timed,
    span_time,
    time_pays,
    timed_waves,
    token_waves,
)
from wavepp.runtime.request import AdmittedRequest, Chunk, Request

# ---- time-equalized packing (the timed chunking) --------------------------------------------------

# Two stages whose step time grows with the context: attention dominates long chunks (the shape of
# the sim's GLM-5.2 fits: a per-wave constant, linear layers per token, L·x and x² attention).
STAGE_FITS = [StageFit(c=2e-3, c_chunk=1e-4, gamma=2e-8, beta=4e-6, alpha_lx=6e-11, alpha_xx=3e-11),
              StageFit(c=1.5e-3, c_chunk=1e-4, gamma=3e-8, beta=5e-6, alpha_lx=5e-11, alpha_xx=2.5e-11)]


def drive(planner: MpuPlanner, a: AdmittedRequest) -> tuple[list[float], list[float]]:
    """Plan waves of one request until it is scheduled. Per wave: its predicted time on the
    bottleneck stage over what ``plan.budget`` tokens of the request take there on average (1.0:
    an average wave of the budget it was planned with), and its predicted seconds there."""
    times, seconds = [], []
    while a.remaining > 0:
        plan = planner.plan([a])
        assert plan is not None
        found = bottleneck([a], STAGE_FITS, plan.budget)
        assert found is not None
        stage, tau = found
        f = STAGE_FITS[stage]
        [chunk] = plan.chunks
        assert chunk.start == a.scheduled
        seconds.append(f.step_time([(chunk.start, chunk.length)]))
        times.append(seconds[-1] / (f.c + plan.budget * tau))
        a.scheduled += chunk.length
    return times, seconds


def makespan(seconds: list[float], num_stages: int = 4) -> float:
    """The flow-shop makespan of waves taking ``seconds`` on every stage alike."""
    return sum(seconds) + (num_stages - 1) * max(seconds)


def test_timed_waves_of_a_rising_context_take_equal_predicted_time_where_mpu_waves_grow() -> None:
    """One 256K-token request into an empty pipeline, at a fixed budget: the drain is near, so time
    pays - every wave takes about the same predicted time, where MPU's token waves grow."""
    budget = lambda: MpuBudget(16384, 16384, B, 8, 2, 4, hysteresis=False)   # noqa: E731
    tokens = 262144
    mpu, mpu_s = drive(MpuPlanner(budget(), 8192, B), adm("m", tokens))
    timed, timed_s = drive(TimedPlanner(budget(), 8192, B, StepTimes(2, lambda: STAGE_FITS), 4), adm("t", tokens))
    assert all(abs(t - 1) <= 0.10 for t in timed[:-1]), [round(t, 3) for t in timed]   # equal time, 10%
    assert timed[-1] <= 1.10
    assert max(mpu) > 1.5 * min(mpu)                   # token waves over a 256K prompt: ever longer
    assert len(timed) <= len(mpu) + 1                  # ... in as many waves: no fixed cost paid more often
    # The same tokens; smaller chunks deep in the context re-read it a little more often: within 1% ...
    assert sum(timed_s) <= 1.01 * sum(mpu_s), (sum(timed_s), sum(mpu_s))
    assert makespan(timed_s) < makespan(mpu_s)         # ... and the pipeline drains sooner


def test_timed_waves_pack_tokens_in_a_long_stream_and_time_where_the_drain_is_near() -> None:
    """Equal times pay once a busy period, at its longest wave, and cost in every deep chunk: with
    much work waiting behind the admitted request the waves are MPU's; alone, they are timed; and
    once the period has run a wave as long as token waves would reach, tokens again."""
    times = StepTimes(2, lambda: STAGE_FITS)
    waiting = [Request(f"w{i}", [0] * 262144, 0.0, []) for i in range(16)]   # type: ignore[arg-type]
    budget = lambda: MpuBudget(16384, 16384, B, 8, 2, 4, hysteresis=False)   # noqa: E731
    stream = TimedPlanner(budget(), 8192, B, times, 4, waiting=lambda: waiting)
    alone = TimedPlanner(budget(), 8192, B, times, 4)
    token = MpuPlanner(budget(), 8192, B)
    a = adm("a", 262144)
    a.scheduled = 65536
    plans = [p.plan([a]) for p in (stream, alone, token)]
    assert all(p is not None for p in plans)
    s, t, m = (p.chunks for p in plans if p is not None)
    assert s == m and t != m                           # the stream packs MPU's tokens; alone, time
    a.scheduled = 196608                               # deep in: its token waves are the period's longest
    alone.longest = 10.0                               # ... unless the period already ran a longer one
    again = alone.plan([a])
    assert again is not None and again.chunks == token.plan([a]).chunks   # type: ignore[union-attr]


def test_time_pays_weighs_the_drain_against_the_extra_chunks() -> None:
    f = STAGE_FITS[0]
    a = adm("a", 262144)
    found = bottleneck([a], [f], 16384)
    assert found is not None
    tau = found[1]
    limit = f.c + 16384 * tau
    assert time_pays([a], f, 16384, limit, 0.0, 4, B)
    assert not time_pays([a], f, 16384, limit, 0.0, 1, B)       # one stage: no fill or drain to shorten
    stream = [Request(f"w{i}", [0] * 262144, 0.0, []) for i in range(64)]   # type: ignore[arg-type]
    assert not time_pays([a], f, 16384, limit, 0.0, 4, B, waiting=stream)   # a long stream
    assert not time_pays([], f, 16384, limit, 0.0, 4, B)
    seconds, longest = token_waves(f, 0, 262144, 16384)
    assert longest == pytest.approx(f.c + f.chunk_time(262144 - 16384, 16384))
    assert seconds == pytest.approx(16 * f.c + span_time(f, 0, 262144, 16384))
    assert timed_waves(f, 0, 262144, limit, B) > seconds          # equal times cost chunks deep in


def test_the_bottleneck_is_the_stage_the_admitted_work_costs_most_at_its_mean_cost_a_token() -> None:
    fresh, deep = adm("a", 8192), adm("b", 262144, reuse_blocks=196608 // B)
    n = 262144 - 196608                                # the deep request computes only past its prefix
    taus = [(8192 * f.chunk_time(0, 8192) / 8192 + n * span_time(f, 196608, n, 8192) / n) / (8192 + n)
            for f in STAGE_FITS]
    assert bottleneck([fresh, deep], STAGE_FITS, 8192) == (0, pytest.approx(taus[0]))
    assert taus[0] > taus[1]                           # deep in a context stage 0's attention costs most ...
    fresh_1 = STAGE_FITS[1].chunk_time(0, 8192) / 8192
    assert bottleneck([fresh], STAGE_FITS, 8192) == (1, pytest.approx(fresh_1))   # ... near its start, stage 1's
    deep.scheduled = deep.request.num_tokens           # a request with nothing left weighs nothing
    assert bottleneck([fresh, deep], STAGE_FITS, 8192) == (1, pytest.approx(fresh_1))
    fresh.scheduled = fresh.request.num_tokens
    assert bottleneck([fresh, deep], STAGE_FITS, 8192) is None


def test_a_span_costs_its_chunks_each_with_its_fixed_part_and_context() -> None:
    f = STAGE_FITS[0]
    by_hand = sum(f.chunk_time(L, 4096) for L in range(1000, 1000 + 5 * 4096, 4096)) + f.chunk_time(21480, 520)
    assert span_time(f, 1000, 5 * 4096 + 520, 4096) == pytest.approx(by_hand)
    assert span_time(f, 0, 4096, 4096) == pytest.approx(f.chunk_time(0, 4096))
    assert span_time(f, 0, 100, 4096) == pytest.approx(f.chunk_time(0, 100))


def test_timed_packing_fills_a_wave_in_time_first_come_first_served() -> None:
    reqs = [adm("a", 2048), adm("b", 2048), adm("c", 2048)]
    long = adm("d", 131072)
    long.scheduled = 120000 // B * B                   # deep in a long context: each token costs more
    f = STAGE_FITS[0]
    limit = f.step_time([(0, 8192)])                   # what 8192 fresh tokens take
    chunks = pack_timed([*reqs, long], limit, 1024, B, f)
    assert [c.request_id for c in chunks] == ["a", "b", "c", "d"]
    assert all(c.is_last for c in chunks[:3])          # whole remainders first
    assert 0 < chunks[3].length < 8192 - 3 * 2048      # deep in a context, the leftover buys fewer tokens
    assert f.step_time([(c.start, c.length) for c in chunks]) <= limit * (1 + 1e-9)
    longer = [Chunk(c.request_id, c.start, c.length + B, 0, False) for c in chunks[3:]]   # a block more: over it
    assert f.step_time([(c.start, c.length) for c in chunks[:3] + longer]) > limit
    no_fragment = pack_timed([*reqs, long], limit, 4096, B, f)   # a leftover below 4096 tokens' time
    assert [c.request_id for c in no_fragment] == ["a", "b", "c"]


def test_a_timed_planner_packs_tokens_until_every_stage_has_a_fit() -> None:
    times = StepTimes(2)                               # a real engine: no prior
    planner = TimedPlanner(MpuBudget(4096, 2048, B, 4, 2, 2, hysteresis=False), 2048, B, times, 2)
    a = adm("r", 65536)
    first = planner.plan([a])
    assert first is not None and first.chunks[0].length == 4096          # MPU's tokens
    for L in range(0, 65536, 4096):                    # the steps the stages ran, observed
        for s, f in enumerate(STAGE_FITS):
            times.observe(s, [(L, 4096)], f.step_time([(L, 4096)]))
    assert times.ready
    a.scheduled = 49152
    later = planner.plan([a])
    assert later is not None and later.chunks[0].length < 4096            # now in time: fewer tokens deep in
    for got, truth in zip(times.stage_fits(), STAGE_FITS, strict=True):   # the online fit found the model
        assert got.step_time([(32768, 4096)]) == pytest.approx(truth.step_time([(32768, 4096)]), rel=1e-3)


def test_the_step_time_fit_is_non_negative_and_exact_on_noiseless_steps() -> None:
    rows, seconds = [], []
    truth = STAGE_FITS[0]
    for L, x, n in [(L, x, n) for L in (0, 1024, 8192, 65536) for x in (256, 2048, 8192) for n in (1, 2, 3)]:
        rows.append(features([(L, x)] * n))
        seconds.append(truth.step_time([(L, x)] * n))
    got = fit(rows, seconds)
    assert all(v >= 0 for v in (got.c, got.c_chunk, got.gamma, got.beta, got.alpha_lx, got.alpha_xx))
    assert got.step_time([(30000, 3000)]) == pytest.approx(truth.step_time([(30000, 3000)]), rel=1e-6)
    # Steps that make an unconstrained fit negative (a cost that falls with more tokens): clamped at 0.
    bent = fit([features([(0, x)]) for x in (100, 200, 400, 800)], [1.0, 0.9, 0.8, 0.7])
    assert all(v >= 0 for v in (bent.c, bent.c_chunk, bent.gamma, bent.beta, bent.alpha_lx, bent.alpha_xx))


def test_dynamic_chunks_follow_sglangs_predictor() -> None:
    """SGLang's dynamic chunking: x solves f(L + x) - f(L) = f(base) - f(0) for f(l) = a·l² + b·l from
    stage 0's fit, smoothed base + 0.75·(x - base), floored at base // 4, block-aligned."""
    import math

    from wavepp.runtime.mechanisms.chunking import DynamicPlanner
    fit = STAGE_FITS[0]
    planner = DynamicPlanner(8192, B, StepTimes(2, lambda: STAGE_FITS), scheduled)
    a, b = fit.alpha_xx, fit.beta
    for L in (0, 16384, 65536, 131072):
        target = a * 8192 ** 2 + b * 8192
        x = (math.sqrt((2 * a * L + b) ** 2 + 4 * a * target) - (2 * a * L + b)) / (2 * a)
        assert a * (L + x) ** 2 + b * (L + x) - (a * L * L + b * L) == pytest.approx(target)   # equal time
        expected = max(2048, int(8192 + 0.75 * (x - 8192)) // B * B)
        assert planner.chunk_tokens(L) == expected, L
    assert planner.chunk_tokens(0) == 8192 and planner.chunk_tokens(131072) < 8192
    a_long = adm("long", 200000)
    a_long.scheduled = 131072
    plan = planner.plan([a_long, adm("next", 4096)])
    assert plan is not None and plan.budget == planner.chunk_tokens(131072) == plan.chunks[0].length
    untrained = DynamicPlanner(8192, B, StepTimes(2), scheduled)          # no fit yet: the static size
    assert untrained.chunk_tokens(131072) == 8192
    # A request's first chunk gets the base size whatever its cached prefix (SGLang sizes only chunked_req).
    reused = adm("reused", 200000, reuse_blocks=131072 // B)
    first = planner.plan([reused])
    assert first is not None and first.chunks[0].length == 8192
    # The fit is taken once (SGLang profiles at startup and never refits): later fits change nothing.
    fits = list(STAGE_FITS)
    kept = DynamicPlanner(8192, B, StepTimes(2, lambda: fits), scheduled)
    before = kept.chunk_tokens(65536)
    fits[0] = StageFit(c=2e-3, c_chunk=1e-4, gamma=2e-8, beta=4e-6, alpha_lx=6e-11, alpha_xx=3e-10)
    assert kept.chunk_tokens(65536) == before
    assert DynamicPlanner(8192, B, StepTimes(2, lambda: fits), scheduled).chunk_tokens(65536) < before
