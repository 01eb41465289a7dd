"""StageCache: lease, escrow, materialize, complete, release - and the accounting invariants."""

from __future__ import annotations

import random

import pytest

from wavepp.runtime.kvcache.followed import DescriptorMismatch
from wavepp.runtime.kvcache.hashing import block_hashes
from wavepp.runtime.kvcache.stage_cache import StageCache

B = 4


def prompt(seed: int, num_blocks: int, extra_tokens: int = 0) -> tuple[list[int], list[int]]:
    rng = random.Random(seed)
    tokens = [rng.randrange(1000) for _ in range(num_blocks * B + extra_tokens)]
    return tokens, block_hashes(tokens, B)


def run_request(c: StageCache, rid: str, hashes: list[int], num_tokens: int, k: int | None = None) -> int:
    """Admit, compute in one chunk and complete a request on one stage; returns the boundary used."""
    k = c.prefix_length(hashes, (num_tokens - 1) // B) if k is None else k
    k = c.lease(rid, hashes, k, num_tokens)
    need = -(-(num_tokens - k * B) // B)
    assert c.can_escrow(need)
    c.escrow(rid, need)
    c.materialize(rid, k * B, num_tokens - k * B, k)
    c.complete(rid, hashes)
    c.check()
    return k


def test_completed_prompt_is_reused_by_the_next_request() -> None:
    """Blocks attached at completion are a hit for a later prompt with the same prefix."""
    c = StageCache(0, 16, B)
    tokens, hashes = prompt(1, 4)
    run_request(c, "a", hashes, len(tokens))
    assert c.prefix_length(hashes) == 4
    attached, detached = c.drain_index_updates()
    assert attached == hashes and detached == []
    # A prompt that shares the prefix reuses all but the block holding the last token.
    assert run_request(c, "b", hashes, len(tokens)) == 3


def test_lease_falls_back_when_the_stage_evicted_part_of_the_prefix_after_the_hint() -> None:
    """The hint said 6 blocks; eviction since then leaves 3; the lease grants 3, not 6."""
    c = StageCache(0, 8, B)
    tokens, hashes = prompt(1, 6)
    run_request(c, "warm", hashes, len(tokens))
    hint = c.prefix_length(hashes)
    assert hint == 6
    # Another request needs 5 blocks: 2 free + 3 evicted from the tail of the cached prefix.
    t2, h2 = prompt(2, 5)
    run_request(c, "other", h2, len(t2), k=0)
    assert c.lease("late", hashes, hint, len(tokens)) == 3
    assert c.stats().num_evictions == 3
    c.release("late")
    c.check()


def test_forced_eviction_takes_only_what_nobody_holds_and_tells_the_index() -> None:
    """``evict_cached`` (memory pressure from outside the run): cached blocks nobody holds go to the
    free list, LRU leaves first; a leased prefix stays; each one is a detach for the hint index;
    what an escrow may claim is unchanged."""
    c = StageCache(0, 16, B)
    tokens, hashes = prompt(1, 4)
    t2, h2 = prompt(2, 4)
    run_request(c, "a", hashes, len(tokens))
    run_request(c, "b", h2, len(t2))
    c.drain_index_updates()
    assert c.lease("keep", hashes, 4, len(tokens)) == 4            # pins a's prefix
    available = c.available_blocks()
    assert c.evict_cached(1 << 20) == 4                             # only b's blocks
    assert c.prefix_length(hashes) == 4 and c.prefix_length(h2) == 0
    assert sorted(c.drain_index_updates()[1]) == sorted(h2)
    assert c.available_blocks() == available and c.stats().num_free == 16 - 4
    c.release("keep")
    assert c.evict_cached(2) == 2 and c.prefix_length(hashes) == 2   # the tail first
    c.check()


def test_escrow_refuses_what_it_cannot_promise() -> None:
    """Escrow counts free + reclaimable blocks minus what other tickets already hold."""
    c = StageCache(0, 8, B)
    tokens, hashes = prompt(1, 4)
    run_request(c, "warm", hashes, len(tokens))      # 4 cached, 4 free
    c.lease("x", [], 0, 6 * B)
    assert c.can_escrow(6)
    c.escrow("x", 6)                                # 4 free + 2 of the cached ones
    c.lease("y", [], 0, 3 * B)
    assert not c.can_escrow(3)                       # only 2 reclaimable left
    with pytest.raises(ValueError, match="cannot escrow 3 blocks"):
        c.escrow("y", 3)
    c.release("y")
    c.lease("y", [], 0, 2 * B)
    assert c.can_escrow(2)
    c.escrow("y", 2)
    assert c.available_blocks() == 0
    c.check()
    for rid in ("x", "y"):
        c.release(rid)
    c.check()


def test_a_lease_may_not_pin_a_block_an_escrow_counts_on() -> None:
    """With every reclaimable block promised, a lease on them stops at 0 (monotone fallback)."""
    c = StageCache(0, 4, B)
    tokens, hashes = prompt(1, 4)
    run_request(c, "warm", hashes, len(tokens))      # all 4 blocks cached, none free
    c.lease("x", [], 0, 4 * B)
    assert c.can_escrow(4)
    c.escrow("x", 4)
    assert c.lease("y", hashes, 3, len(tokens)) == 0
    c.release("y")
    c.release("x")
    c.check()


def test_escrow_takes_no_block_and_materialization_evicts_the_leaf_oldest_then() -> None:
    """An escrow is a count: the block it will take stays cached and a hit (a later lease may pin
    it); materialization takes the LRU leaf of that moment."""
    c = StageCache(0, 8, B)
    ta, ha = prompt(1, 4)
    tb, hb = prompt(2, 4)
    run_request(c, "a", ha, len(ta))                 # older
    run_request(c, "b", hb, len(tb))                 # newer; no free block left
    c.lease("x", [], 0, 1 * B)
    assert c.can_escrow(1)
    c.escrow("x", 1)
    assert c.stats().num_evictions == 0 and c.prefix_length(ha) == 4 and c.available_blocks() == 7
    assert c.lease("z", ha, 4, 4 * B + 1) == 4       # pins the oldest leaf, a[3] (7 reclaimable >= 1 left)
    table = c.materialize("x", 0, B, 0)
    assert c.pool.hash[table[0]] is None      # an owned block now, taken from ...
    assert c.prefix_length(ha) == 4 and c.prefix_length(hb) == 3   # ... prompt b's tail, oldest then
    assert c.stats().num_evictions == 1 and c.stats().num_escrowed_blocks == 0
    for rid in ("x", "z"):
        c.release(rid)
    c.check()


def test_stages_that_complete_at_different_times_evict_the_same_blocks() -> None:
    """Two stages run the same requests; stage 1 lags (it completes 'a' only after 'c' is
    admitted). The escrow promises a count on both and each stage picks its block when it
    materializes - after completing the same requests - so both keep the same blocks (named at the
    escrow, stage 1 would have evicted 'b' while stage 0 kept it)."""
    stages = [StageCache(s, 6, B) for s in range(2)]
    ta, ha = prompt(1, 3, extra_tokens=1)            # 4 blocks, the last one partial
    tb, hb = prompt(2, 2)
    tc, hc = prompt(3, 1)                            # one block to find
    for c in stages:
        run_request(c, "b", hb, len(tb))             # cached, LRU-oldest
        c.lease("a", ha, 0, len(ta))
        c.escrow("a", 4)
        c.materialize("a", 0, len(ta), 0)
    stages[0].complete("a", ha)                      # stage 0 is ahead: its partial block is free again
    for c in stages:                                 # 'c' is admitted on both at the same moment
        assert c.lease("c", hc, 0, len(tc)) == 0
        c.escrow("c", 1)                             # stage 0 has a free block now, stage 1 none
    stages[1].complete("a", ha)                      # stage 1 catches up before it prepares 'c'
    for c in stages:
        c.materialize("c", 0, len(tc), 0)
        c.complete("c", hc)
        c.check()
    assert [c.stats().num_evictions for c in stages] == [0, 0]       # both took the freed block
    assert [c.prefix_length(hb) for c in stages] == [2, 2] and [c.prefix_length(ha) for c in stages] == [3, 3]


def test_descriptor_mismatch_is_refused_and_release_leaks_nothing() -> None:
    """A chunk that does not follow the stage's own state raises; releasing returns every block."""
    c = StageCache(0, 8, B)
    tokens, hashes = prompt(1, 4)
    run_request(c, "warm", hashes, len(tokens))
    c.lease("r", hashes, 2, 6 * B)
    assert c.can_escrow(4)
    c.escrow("r", 4)
    with pytest.raises(DescriptorMismatch):
        c.materialize("r", 2 * B, B, reuse_blocks=3)          # planned on a different k
    with pytest.raises(DescriptorMismatch):
        c.materialize("r", 2 * B + 1, B, reuse_blocks=2)      # does not start where the stage is
    with pytest.raises(DescriptorMismatch):
        c.materialize("nobody", 0, B, reuse_blocks=0)         # no lease
    c.materialize("r", 2 * B, 2 * B, reuse_blocks=2)
    c.release("r")
    c.check()
    assert c.stats().num_leases == 0 and c.stats().num_escrowed_blocks == 0


def test_partial_last_block_is_not_cached() -> None:
    c = StageCache(0, 8, B)
    tokens, hashes = prompt(1, 3, extra_tokens=2)
    run_request(c, "a", hashes, len(tokens))
    assert c.pool.num_cached == 3 and c.pool.num_free == 5


def test_concurrent_requests_computing_the_same_blocks_cache_them_once() -> None:
    """Two requests compute the same prompt; the second completion adopts the first's blocks."""
    c = StageCache(0, 16, B)
    tokens, hashes = prompt(1, 4)
    for rid in ("a", "b"):
        c.lease(rid, hashes, 0, len(tokens))
        assert c.can_escrow(4)
        c.escrow(rid, 4)
        c.materialize(rid, 0, len(tokens), 0)
    c.complete("a", hashes)
    c.complete("b", hashes)
    c.check()
    assert c.pool.num_cached == 4 and c.pool.num_free == 12


@pytest.mark.parametrize("seed", range(8))
def test_random_operations_keep_every_invariant(seed: int) -> None:
    """Random interleavings of admission, chunks, completion and release never over-commit or leak."""
    rng = random.Random(seed)
    c = StageCache(0, 40, B)
    prompts = [prompt(s, rng.randrange(2, 9), rng.randrange(0, B)) for s in range(6)]
    live: dict[str, tuple[list[int], int, int]] = {}   # rid -> (hashes, num_tokens, next token)
    for step in range(400):
        op = rng.random()
        if op < 0.35:
            tokens, hashes = rng.choice(prompts)
            rid = f"r{step}"
            k = c.lease(rid, hashes, c.prefix_length(hashes, (len(tokens) - 1) // B), len(tokens))
            before = c.available_blocks()
            need = -(-(len(tokens) - k * B) // B)
            ok = c.can_escrow(need)
            if ok:
                c.escrow(rid, need)
            assert ok == (need <= before)
            if ok:
                live[rid] = (hashes, len(tokens), k * B)
            else:
                c.release(rid)
        elif op < 0.75 and live:
            rid = rng.choice(sorted(live))
            hashes, n, pos = live[rid]
            length = min(n - pos, rng.randrange(1, 3 * B))
            c.materialize(rid, pos, length, c.leases[rid].reuse_blocks)
            if pos + length == n:
                c.complete(rid, hashes)
                del live[rid]
            else:
                live[rid] = (hashes, n, pos + length)
        elif live:
            rid = rng.choice(sorted(live))
            c.release(rid)
            del live[rid]
        c.check()
    for rid in list(live):
        c.release(rid)
    c.check()
    assert c.pool.num_free + c.pool.num_cached == c.pool.num_blocks
