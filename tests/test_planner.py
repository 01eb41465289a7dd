"""Wave planning (DESIGN §2): MPU budget candidates, proposal, hysteresis, FCFS and static packing."""

from __future__ import annotations

from array import array

import pytest
from hypothesis import given
from hypothesis import strategies as st

from wavepp.runtime.control.knobs import KnobError, Knobs, check_block_size
from wavepp.runtime.planning.planner import (
    MpuBudget,
    MpuPlanner,
    budget_candidates,
    pack_fcfs,
    pack_static,
)
from wavepp.runtime.request import AdmittedRequest, Chunk, Request

B = 64


def adm(rid: str, num_tokens: int, reuse_blocks: int = 0, attempt: int = 0) -> AdmittedRequest:
    req = Request(rid, array("I", range(num_tokens)), 0.0, list(range(num_tokens // B)))
    return AdmittedRequest(req, reuse_blocks, 0.0, B, attempt=attempt)


# ---- budget candidates -------------------------------------------------------------------------

@pytest.mark.parametrize(("m", "b_min", "block", "expected"), [
    (16384, 8192, 64, [16384, 8192]),                       # published settings
    (16384, 1024, 64, [16384, 8192, 4096, 2048, 1024]),
    (8192, 8192, 64, [8192]),                               # M == b_min: one candidate
    # 10000/2 = 5000 -> 4992 (78 blocks), 2496, 1248 -> 1216 (19 blocks), 608 -> 576 < b_min -> 1000
    (10000, 1000, 64, [10000, 4992, 2496, 1216, 1000]),
    (1000, 100, 64, [1000, 448, 192, 100]),                 # 500 -> 448, 224 -> 192, 96 -> 64 < 100 -> 100
])
def test_budget_candidates(m: int, b_min: int, block: int, expected: list[int]) -> None:
    """b_0 = M, b_{j+1} = max(b_min, alignDown_B(b_j / 2)), ending at b_min."""
    assert budget_candidates(m, b_min, block) == expected


@given(st.integers(1, 64).map(lambda k: 64 * k), st.integers(16, 1 << 20), st.data())
def test_budget_candidates_properties(block: int, m: int, data: st.DataObject) -> None:
    """Strictly decreasing, start at M, end at b_min, all but M and b_min block-aligned."""
    b_min = data.draw(st.integers(16, m))
    c = budget_candidates(m, b_min, block)
    assert c[0] == m and c[-1] == b_min
    assert all(a > b for a, b in zip(c, c[1:], strict=False))
    assert all(x % block == 0 for x in c[1:-1])


# ---- MPU proposal ----------------------------------------------------------------------------

def mpu(b_min: int = 1024, pp: int = 4, ring: int = 8, fill: int = 2, hysteresis: bool = True) -> MpuBudget:
    return MpuBudget(16384, b_min, B, ring, fill, pp, hysteresis)


def test_target_ready_waves() -> None:
    """S = R + (F-1)·P: P=4, R=8, F=2 gives 12; F=1 gives R."""
    assert mpu().target == 12
    assert mpu(fill=1).target == 8
    assert mpu(pp=2, ring=4, fill=3).target == 8


@pytest.mark.parametrize(("remaining", "expected"), [
    # W = 196608: n(16384) = 196608/16384 = 12 >= S exactly -> M
    ([16384] * 12, 16384),
    # W = 180224: n(16384) = 11 < 12, n(8192) = 22 -> 8192
    ([16384] * 11, 8192),
    # W = 49152: n(8192) = max(6, N_{>4096} = 0) = 6 (4096 is not > 4096), n(4096) = 12 -> 4096
    ([4096] * 12, 4096),
    # W = 60000: the N term wins: n(8192) = max(7.3, N_{>4096} = 12) = 12 -> 8192 (W alone: 4096)
    ([5000] * 12, 8192),
    # W = 3000: n(1024) = max(2.9, N_{>512} = 3) = 3 < 12 -> fall back to b_min
    ([1000] * 3, 1024),
    # one huge request: n(16384) = 6.1, n(8192) = 100000/8192 = 12.2 -> 8192
    ([100000], 8192),
])
def test_propose_hand_cases(remaining: list[int], expected: int) -> None:
    """The largest candidate b with max(W/b, N_{>b/2}) >= S=12, else b_min (P=4, R=8, F=2, b_min=1024)."""
    assert mpu().propose(remaining) == expected


def test_propose_published_settings() -> None:
    """With b_min = 8192: twelve 9000-token requests pick M via N_{>8192} = 12 although W/M = 6.6."""
    budget = mpu(b_min=8192)
    assert budget.waves_available(16384, [9000] * 12) == 12
    assert budget.propose([9000] * 12) == 16384
    assert budget.propose([9000] * 11) == 8192          # n(16384) = 11, n(8192) = 11: fallback to b_min
    assert budget.propose([]) == 8192


def test_waves_available_formula() -> None:
    """n(b) = max(W / b, number of requests with more than b/2 tokens left)."""
    budget = mpu()
    assert budget.waves_available(1000, [500, 501, 2000]) == 3.001
    assert budget.waves_available(1000, [501, 501, 501, 501]) == 4       # N term: 4 > 2.004
    assert budget.waves_available(1000, [500, 500]) == 1.0              # exactly b/2 is not "more"


@given(st.lists(st.integers(1, 40000), max_size=40))
def test_propose_is_largest_qualifying_candidate(remaining: list[int]) -> None:
    """The proposal qualifies (or is b_min) and no larger candidate qualifies."""
    budget = mpu()
    s = budget.target

    def n(b: int) -> float:
        return max(sum(remaining) / b, sum(1 for r in remaining if 2 * r > b))

    b = budget.propose(remaining)
    assert b in budget.candidates
    assert n(b) >= s or b == 1024
    assert all(n(c) < s for c in budget.candidates if c > b)


# ---- hysteresis --------------------------------------------------------------------------------

LOW, MID, HIGH = [100], [4096] * 10, [16384] * 10      # propose 1024, 4096, 16384 at S = 10


def hyst(hysteresis: bool = True) -> MpuBudget:
    """P = 2, R = 8, F = 2: S = 10, raise after R/2 = 4 agreeing decisions, lower after P = 2."""
    b = MpuBudget(16384, 1024, B, 8, 2, 2, hysteresis)
    assert (b.propose(LOW), b.propose(MID), b.propose(HIGH)) == (1024, 4096, 16384)
    return b


def test_first_decision_is_the_proposal() -> None:
    """With no current budget the first proposal is taken at once."""
    assert hyst().decide(MID) == 4096


def test_raise_needs_r_over_2_consecutive_higher_proposals() -> None:
    """From 1024, three higher proposals keep 1024; the fourth raises to 16384."""
    b = hyst()
    assert b.decide(LOW) == 1024
    assert [b.decide(HIGH) for _ in range(4)] == [1024, 1024, 1024, 16384]
    assert b.decide(HIGH) == 16384


def test_lower_needs_p_consecutive_lower_proposals() -> None:
    """From 16384, one lower proposal keeps 16384; the second lowers to 1024."""
    b = hyst()
    b.decide(HIGH)
    assert [b.decide(LOW) for _ in range(2)] == [16384, 1024]


def test_equal_proposal_resets_the_streak() -> None:
    """Three higher, one equal, then three higher again is not enough to raise; a fourth is."""
    b = hyst()
    b.decide(LOW)
    assert [b.decide(HIGH) for _ in range(3)] == [1024] * 3
    assert b.decide(LOW) == 1024
    assert [b.decide(HIGH) for _ in range(3)] == [1024] * 3
    assert b.decide(HIGH) == 16384
    assert b.decide(LOW) == 16384 and b.decide(HIGH) == 16384     # lower streak of 1, reset by equal
    assert b.decide(LOW) == 16384                                  # streak restarts at 1
    assert b.decide(LOW) == 1024


def test_opposite_proposal_resets_the_streak() -> None:
    """A higher proposal between two lower ones restarts the lowering count."""
    b = hyst()
    b.decide(MID)
    assert [b.decide(p) for p in (LOW, HIGH, LOW)] == [4096, 4096, 4096]
    assert b.decide(LOW) == 1024


def test_without_hysteresis_follows_proposals() -> None:
    """hysteresis=False: every decision is the current proposal."""
    b = hyst(hysteresis=False)
    assert [b.decide(p) for p in (LOW, HIGH, MID, LOW, HIGH)] == [1024, 16384, 4096, 1024, 16384]


# ---- FCFS packing ------------------------------------------------------------------------------

def test_fcfs_whole_remainders_in_order() -> None:
    """Requests that fit are taken whole, in admission order, each flagged as its last chunk."""
    reqs = [adm("a", 300), adm("b", 200), adm("c", 100)]
    assert pack_fcfs(reqs, 1024, 512, B) == [
        Chunk("a", 0, 300, 0, True), Chunk("b", 0, 200, 0, True), Chunk("c", 0, 100, 0, True)]


def test_fcfs_chunk_starts_at_reuse_boundary() -> None:
    """A request with k reused blocks is scheduled from k·B; the chunk carries k and the attempt."""
    a = adm("a", 1000, reuse_blocks=2, attempt=3)
    assert a.scheduled == a.completed == 128 and a.remaining == 872
    assert pack_fcfs([a], 1024, 512, B) == [Chunk("a", 128, 872, 2, True, 3)]


def test_fcfs_block_aligned_fragment_when_space_allows() -> None:
    """After a 300-token request, 724 tokens of space >= 512 get a 704-token (11 block) fragment."""
    chunks = pack_fcfs([adm("a", 300), adm("b", 2000)], 1024, 512, B)
    assert chunks == [Chunk("a", 0, 300, 0, True), Chunk("b", 0, 704, 0, False)]


def test_fcfs_fragment_ends_on_block_boundary() -> None:
    """Fragment end is aligned in absolute positions: start 192 + 1000 space -> end 1152, length 960."""
    assert pack_fcfs([adm("a", 5000, reuse_blocks=3)], 1000, 500, B) == [Chunk("a", 192, 960, 3, False)]


def test_fcfs_fragment_exactly_min_fragment() -> None:
    """Space equal to min_fragment is enough for a fragment."""
    chunks = pack_fcfs([adm("a", 512), adm("b", 2000)], 1024, 512, B)
    assert chunks == [Chunk("a", 0, 512, 0, True), Chunk("b", 0, 512, 0, False)]


def test_fcfs_no_small_fragment_in_leftover() -> None:
    """A leftover of 324 tokens < min_fragment 512 stays empty rather than hold a small fragment."""
    assert pack_fcfs([adm("a", 700), adm("b", 2000)], 1024, 512, B) == [Chunk("a", 0, 700, 0, True)]


def test_fcfs_skips_fully_scheduled_requests() -> None:
    """A request with nothing left is skipped, not packed as an empty chunk."""
    done = adm("done", 640)
    done.scheduled = 640
    assert pack_fcfs([done, adm("b", 100)], 1024, 512, B) == [Chunk("b", 0, 100, 0, True)]


def test_fcfs_does_not_mutate_requests() -> None:
    """Packing only describes chunks; the caller advances ``scheduled``."""
    a = adm("a", 5000, reuse_blocks=1)
    pack_fcfs([a], 1024, 512, B)
    assert a.scheduled == 64 and a.remaining == 4936


@st.composite
def fcfs_case(draw: st.DrawFn) -> tuple[list[AdmittedRequest], int, int]:
    reqs = []
    for i in range(draw(st.integers(0, 8))):
        n = draw(st.integers(1, 6000))
        a = adm(f"r{i}", n, reuse_blocks=draw(st.integers(0, n // B)))
        reqs.append(a)
    budget = draw(st.integers(B, 8192))
    min_fragment = B * draw(st.integers(1, budget // B))        # block-aligned, as MPU's b_min and b/2 are
    return reqs, budget, min_fragment


@given(fcfs_case())
def test_fcfs_properties(case: tuple[list[AdmittedRequest], int, int]) -> None:
    """Within budget, FCFS prefix, at most one aligned fragment >= min_fragment, nothing more fits."""
    reqs, budget, min_fragment = case
    chunks = pack_fcfs(reqs, budget, min_fragment, B)
    pending = [a for a in reqs if a.remaining > 0]
    assert sum(c.length for c in chunks) <= budget
    assert [c.request_id for c in chunks] == [a.id for a in pending[: len(chunks)]]
    for c, a in zip(chunks, pending, strict=False):
        assert (c.start, c.reuse_blocks, c.attempt) == (a.scheduled, a.reuse_blocks, a.attempt)
        assert c.length > 0
        assert c.is_last == (c.start + c.length == a.request.num_tokens)
    fragments = [c for c in chunks if not c.is_last]
    assert len(fragments) <= 1
    for f in fragments:
        assert f.length >= min_fragment and (f.start + f.length) % B == 0
    if len(chunks) < len(pending):
        # the next request neither fits whole nor may be cut into the space left
        space = budget - sum(c.length for c in chunks)
        assert pending[len(chunks)].remaining > space and space < min_fragment


# ---- the planners ---------------------------------------------------------------------------

def test_mpu_planner_plan() -> None:
    """MpuPlanner decides the budget, packs with min_fragment = max(b_min, b/2), reports n(b)."""
    planner = MpuPlanner(mpu(), 1024, B)
    reqs = [adm(f"r{i}", 5000) for i in range(12)]
    plan = planner.plan(reqs)
    assert plan is not None
    assert plan.budget == 8192 and plan.ready_waves == 12
    # r0 takes 5000; the 3192 left is below min_fragment max(1024, 8192/2) = 4096: no fragment of r1
    assert [(c.request_id, c.length, c.is_last) for c in plan.chunks] == [("r0", 5000, True)]
    assert planner.plan([]) is None
    done = adm("d", 640)
    done.scheduled = 640
    assert planner.plan([done]) is None


@given(st.lists(st.integers(1, 30000), min_size=1, max_size=20), st.integers(1, 16))
def test_mpu_planner_always_makes_progress(sizes: list[int], b_min_blocks: int) -> None:
    """With a block-aligned b_min, a plan exists whenever some admitted request has tokens left."""
    b_min = B * b_min_blocks
    planner = MpuPlanner(MpuBudget(16384, b_min, B, 8, 2, 4), b_min, B)
    plan = planner.plan([adm(f"r{i}", n) for i, n in enumerate(sizes)])
    assert plan is not None and plan.chunks and plan.chunks[0].request_id == "r0"


def test_budgets_that_are_not_whole_blocks_are_refused() -> None:
    """b_min = 16 < B = 64 would let MPU pick a sub-block budget and cut 0-token chunks: refused up front."""
    with pytest.raises(KnobError, match="min_wave_tokens"):
        check_block_size(Knobs(min_wave_tokens=16), B)
    with pytest.raises(KnobError, match="max_wave_tokens"):
        check_block_size(Knobs(max_wave_tokens=10000), B)
    assert check_block_size(Knobs(), B) == Knobs()


# ---- static packing (baselines) ------------------------------------------------------------

def test_static_truncates_to_block_unit() -> None:
    """Each request in order gets min(remaining, capacity); a truncated chunk is rounded down to B."""
    chunks = pack_static([adm("a", 3000), adm("b", 3000), adm("c", 5000)], 8192, B)
    # 8192 - 6000 = 2192 left -> 2176 (34 blocks)
    assert chunks == [Chunk("a", 0, 3000, 0, True), Chunk("b", 0, 3000, 0, True), Chunk("c", 0, 2176, 0, False)]


def test_static_fills_small_leftovers_unlike_mpu() -> None:
    """Static chunking cuts a one-block fragment into a 124-token leftover; FCFS with min_fragment doesn't."""
    reqs = [adm("a", 900), adm("b", 2000)]
    assert pack_static(reqs, 1024, B) == [Chunk("a", 0, 900, 0, True), Chunk("b", 0, 64, 0, False)]
    assert pack_fcfs(reqs, 1024, 512, B) == [Chunk("a", 0, 900, 0, True)]


def test_static_from_reuse_boundary() -> None:
    """A truncated chunk ends block-aligned in absolute positions and starts at the reuse boundary."""
    assert pack_static([adm("a", 10000, reuse_blocks=1)], 8192, B) == [Chunk("a", 64, 8192, 1, False)]
    assert pack_static([adm("a", 640, reuse_blocks=10)], 8192, B) == []          # nothing left
