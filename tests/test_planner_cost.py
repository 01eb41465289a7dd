"""The cost-aware wave budget (runtime/planning/cost.py): the pipeline model's choices, by hand."""

from __future__ import annotations

from array import array
from collections.abc import Sequence

import pytest

from wavepp.runtime.planning import step_times
from wavepp.runtime.planning.cost import CostPlanner, fcfs_waves, level_cap, occupancy
from wavepp.runtime.planning.planner import MpuBudget, MpuPlanner, pack_fcfs, scheduled
from wavepp.runtime.planning.step_times import Shape, StageFit, StepTimes
from wavepp.runtime.request import AdmittedRequest, Request

B = 64
P = 4


def adm(rid: str, num_tokens: int, cached: int = 0) -> AdmittedRequest:
    req = Request(rid, array("I", range(num_tokens)), 0.0, list(range(num_tokens // B)))
    return AdmittedRequest(req, cached // B, 0.0, B)


def linear(c: float = 0.025, beta: float = 20e-6, alpha_lx: float = 0.0, alpha_xx: float = 0.0):  # type: ignore[no-untyped-def]
    """A step model every stage shares: a fixed cost a wave, a cost a token, attention terms."""
    def model(stage: int, chunks: Sequence[Shape]) -> float:
        return c + sum(beta * x + alpha_lx * L * x + alpha_xx * x * x for L, x in chunks)
    return model


def planner(model=None, b_min: int = 8192, prior=None) -> CostPlanner:  # type: ignore[no-untyped-def]
    budget = MpuBudget(16384, b_min, B, ring=2 * P, fill_factor=2, num_stages=P)
    return CostPlanner(budget, b_min, B, StepTimes(P, prior, model), P)


def test_occupancy_is_the_share_of_time_the_circulating_waves_keep_a_stage_busy() -> None:
    assert occupancy(6400, 800, 1600, P) == 1.0                   # 4 waves of whole requests: one per stage
    assert occupancy(6400, 800, 3200, P) == pytest.approx(0.5)     # 2 waves for 4 stages
    assert occupancy(65536, 65536, 8192, P) == pytest.approx(8 / 11)   # one prompt in 8 waves: its fill and drain


def test_a_request_whose_successor_waits_for_its_last_wave_needs_p_minus_1_more() -> None:
    """Two 2-wave requests make 4 waves, yet a stage idles while each one's successor waits P-1 steps."""
    assert occupancy(2 * 32768, 32768, 16384, P) == pytest.approx(4 / (2 + P - 1))
    assert occupancy(2 * 32768, 32768, 8192, P) == 1.0             # 8 waves of 4-wave requests: 8 >= 4 + 3


def test_little_work_is_split_so_that_every_stage_has_a_wave() -> None:
    """Eight requests of 800 new tokens after a cached 7K: MPU (b_min 8192) sends them as one wave that
    crosses the four stages one after another; the cost budget packs two a wave, four waves for four
    stages (by hand: 2048 -> 4 waves of 1600, rate 6400 / 4 x 57 ms, occupancy 1; 4096 -> 4000 + 2400,
    occupancy 1/2; 1024 -> 8 waves of 800, occupancy 1 but 8 x 41 ms)."""
    work = [adm(f"r{i}", 8192, cached=7392 // B * B) for i in range(8)]
    mpu = MpuPlanner(MpuBudget(16384, 8192, B, 2 * P, 2, P), 8192, B).plan(work)
    assert mpu is not None and len(mpu.chunks) == 8
    plan = planner(linear()).plan(work)
    assert plan is not None and plan.budget == 2048
    assert [c.request_id for c in plan.chunks] == ["r0", "r1"]


def test_when_the_stages_stay_busy_the_wave_is_as_large_as_the_step_runs_best() -> None:
    """Four fresh 32K prompts: MPU wants 12 waves of unscheduled work and halves its budget; every budget
    down to 8192 keeps the stages busy (8 waves of 2-wave requests, 8 >= 2 + 3), so the cost budget takes
    the wave whose fixed cost is paid least often."""
    work = [adm(f"r{i}", 32768) for i in range(4)]
    mpu = MpuPlanner(MpuBudget(16384, 8192, B, 2 * P, 2, P), 8192, B).plan(work)
    assert mpu is not None and mpu.budget == 8192
    plan = planner(linear()).plan(work)
    assert plan is not None and plan.budget == 16384 and plan.chunks[0].length == 16384


def test_one_long_prompt_is_chunked_for_its_own_fill_and_drain() -> None:
    """A lone 64K prompt: k chunks of b pipeline through P stages in (k + P - 1) steps of t(b); the
    budget is the candidate of the shortest such makespan, computed here by hand."""
    model = linear()
    makespans = {b: (65536 // b + P - 1) * model(0, [(0, b)]) for b in (16384, 8192, 4096, 2048, 1024)}
    plan = planner(model, b_min=1024).plan([adm("long", 65536)])
    assert plan is not None and plan.budget == min(makespans, key=makespans.__getitem__) == 4096


def test_candidates_are_priced_on_the_same_work_not_on_their_first_wave_alone() -> None:
    """After a cached 32K context one 16K chunk costs less than two 8K chunks (the second re-reads a deeper
    context), although the first 8K chunk alone costs less a token (its x^2 attention is a quarter): the
    budget compares the same 16K tokens and takes 16384."""
    model = linear(c=0.020, beta=10e-6, alpha_lx=1e-10, alpha_xx=1.7e-10)
    one = model(0, [(32768, 16384)])
    first, second = model(0, [(32768, 8192)]), model(0, [(40960, 8192)])
    assert one < first + second and first / 8192 < one / 16384           # the case is what it says
    work = [adm(f"r{i}", 49152, cached=32768) for i in range(16)]
    plan = planner(model).plan(work)
    assert plan is not None and plan.budget == 16384


def in_flight(rid: str, num_tokens: int, cached: int = 0) -> AdmittedRequest:
    """An admitted request whose every chunk is planned: work in the system, none left to plan."""
    a = adm(rid, num_tokens, cached)
    a.scheduled = num_tokens
    return a


def test_budgets_that_pack_the_work_alike_keep_the_one_in_force() -> None:
    """One 800-token request to plan beside four 8K prompts in flight: every budget from 1024 up to the
    level cap (16384: the 33,568 tokens in the system over four stages, rounded up the ladder) packs it as
    one wave; the proposal is the budget in force when it is among them (no vote for a change the wave
    would not show)."""
    work = [adm("a", 800)] + [in_flight(f"f{i}", 8192) for i in range(4)]
    p = planner(linear())
    p.budget.current = 8192
    assert p.propose(work) == 8192
    p.budget.current = 512                         # below the group: its smallest member
    assert p.propose(work) == 1024


def test_a_wave_is_no_larger_than_the_work_in_the_system_spread_over_the_stages() -> None:
    """A closed loop of 32 clients asking 2,048-token questions about a cached 96K document, 28 of them in
    flight and 4 returned: the four pack as one 8K wave at every budget from 8192 up, so without a cap the
    budget in force (32768) would stay and a wave could take up to 16 returning requests, leaving fewer
    waves than stages. The 64K tokens in the system over four stages cap the budget at 16384; one request
    alone is never cut below its own size by the cap (its fill and drain are the model's to price)."""
    budget = MpuBudget(32768, 16384, B, ring=2 * P, fill_factor=2, num_stages=P)
    p = CostPlanner(budget, 16384, B, StepTimes(P, None, linear()), P)
    p.budget.current = 32768
    doc = 98304
    work = [in_flight(f"f{i}", doc + 2048, cached=doc) for i in range(28)] + \
        [adm(f"r{i}", doc + 2048, cached=doc) for i in range(4)]
    assert p.propose(work) == 16384
    assert level_cap(p.ladder, 64 * 1024, 2048, P) == 16384
    assert level_cap(p.ladder, 800, 800, P) == 1024
    assert level_cap(p.ladder, 1e9, 2048, P) == 32768      # more work than the ladder's top: no cap


def test_the_work_in_the_system_is_spread_over_p_plus_1_waves_of_whole_requests() -> None:
    """64 clients with 896 new tokens each (57,344 in the system) at a 16384 budget: packed to the budget, the
    waves take 18, 18, 18 and 10 requests, and a closed loop keeps those groups; spread over P + 1 waves of
    57,344 / 5 + 896 tokens (12,416 in blocks), they take 13, 13, 13, 13 and 12 - one wave of slack for the
    group on its way back, no remainder of its own."""
    p = planner(linear())
    work = [adm(f"r{i}", 8192, cached=8192 - 896) for i in range(64)]

    def groups(budget: int) -> list[int]:
        return [len(w) for w in fcfs_waves(work, budget, p.min_fragment(budget), B, scheduled, 64 * 896)]

    assert groups(16384) == [18, 18, 18, 10]
    assert p.spread(work, 16384) == 12416
    assert groups(12416) == [13, 13, 13, 13, 12]
    more = [adm(f"r{i}", 8192, cached=8192 - 896) for i in range(256)]
    assert p.spread(more, 16384) == 16384          # 229K: 14 waves of 16,384 + 896 -> the budget caps it


def test_the_spread_leaves_lone_requests_and_little_work_to_the_model() -> None:
    """Waves below b_min, or of fewer than two requests on average, are the pipeline model's to size
    (a lone prompt's fill and drain, little work over the stages): packed at the budget itself."""
    p = planner(linear())
    assert p.spread([adm("long", 65536)], 8192) == 8192
    assert p.spread([adm(f"r{i}", 8192, cached=8192 - 896) for i in range(16)], 4096) == 4096   # 14,336 / 5 < b_min
    assert p.spread([adm(f"r{i}", 24576) for i in range(8)], 16384) == 16384   # 8 requests in 12 waves


def test_without_a_model_or_fits_it_plans_as_mpu() -> None:
    work = [adm(f"r{i}", 8192, cached=7392 // B * B) for i in range(8)]
    mpu = MpuPlanner(MpuBudget(16384, 8192, B, 2 * P, 2, P), 8192, B).plan(work)
    assert planner(None).plan(work) == mpu


def test_with_fits_alone_it_prices_waves_by_the_fits() -> None:
    """A real engine has no model: the fits (here a prior) price the waves, the same choice as the model."""
    fit = StageFit(c=0.025, c_chunk=0.0, gamma=0.0, beta=20e-6, alpha_lx=0.0, alpha_xx=0.0)
    work = [adm(f"r{i}", 8192, cached=7392 // B * B) for i in range(8)]
    plan = planner(None, prior=lambda: [fit] * P).plan(work)
    assert plan is not None and plan.budget == 2048


def test_the_work_is_packed_on_copies() -> None:
    work = [adm("a", 5000), adm("b", 3000)]
    waves = fcfs_waves(work, 2048, 1024, B, lambda a: a.scheduled, 8000)
    assert [sum(c.length for c in w) for w in waves] == [2048, 2048, 1992, 1912]
    assert [a.scheduled for a in work] == [0, 0]
    assert waves[0] == pack_fcfs(work, 2048, 1024, B)


def test_predict_asks_the_engines_model_for_the_slowest_stage() -> None:
    times = StepTimes(2, model=lambda stage, chunks: (stage + 1) * sum(x for _, x in chunks) * 1e-6)
    assert times.can_predict and times.predict([(0, 1000)]) == pytest.approx(2e-3)
    assert not StepTimes(2).can_predict


def test_a_wave_priced_before_is_not_asked_of_the_model_again(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[tuple[int, tuple[tuple[int, int], ...]]] = []

    def model(stage: int, chunks: Sequence[tuple[int, int]]) -> float:
        asked.append((stage, tuple(chunks)))
        return (stage + 1) * sum(x for _, x in chunks) * 1e-6
    monkeypatch.setattr(step_times, "PREDICT_MEMO", 3)
    times = StepTimes(2, model=model)
    waves = [[(0, 1000)], [(0, 500), (500, 500)], [(0, 1000)], [(0, 500), (500, 500)]]
    assert [times.predict(w) for w in waves] == pytest.approx([2e-3, 2e-3, 2e-3, 2e-3])
    assert asked == [(s, tuple(w)) for w in waves[:2] for s in (0, 1)]
    for x in (1, 2, 3):                               # a full table starts over: bounded
        times.predict([(0, x)])
    assert len(times._predicted) <= 3
    asked.clear()
    assert times.predict([(0, 1000)]) == pytest.approx(2e-3) and len(asked) == 2


def test_on_the_sim_a_light_load_keeps_the_pipeline_busy_where_mpu_sends_one_wave_at_a_time() -> None:
    """Kimi-K3, PP4, 16 clients of 8K-token prompts 90% cached: MPU's b_min of 8192 holds the ~13K new
    tokens in the system in two waves (half the stages idle); the cost budget circulates about four."""
    from wavepp.runtime.bench.runs import BenchConfig, run_one
    from wavepp.runtime.engines.config import SimConfig
    from wavepp.runtime.engines.sim.engine import SimEngine
    from wavepp.runtime.sources.workloads import parse_workload

    engine = SimEngine(SimConfig("kimi-k3", "b300", 4))
    cfg = BenchConfig(parse_workload("reuse90"), [16], [], 64, prompt_tokens=8192)
    mpu, cost = (run_one(engine, cfg, p, 16, telemetry="off").figures for p in ("wavepp+chunking=mpu",
                                                                                 "wavepp+chunking=cost"))
    assert mpu.pipeline_efficiency < 0.5 < 0.75 < cost.pipeline_efficiency
    assert cost.input_tokens_per_s > 1.3 * mpu.input_tokens_per_s
