"""BlockPool: the order blocks leave the free list and the LRU, which every run's figures rest on (a
chunk's blocks are taken in one call, a chain attached or unpinned in one call)."""

from __future__ import annotations

import pytest

from tests.gc_reach import tracked_within
from wavepp.runtime.kvcache.block_pool import BlockPool


def cached_chain(pool: BlockPool, hashes: list[int]) -> list[int]:
    """Take, attach and unpin a chain of blocks (a completed request's prompt): unheld, evictable at its leaf."""
    table = pool.take(len(hashes), [])
    pool.attach_chain(table, hashes, 0, len(hashes), [])
    pool.unpin_many(reversed(table))
    return table


def test_take_hands_out_returned_blocks_last_first_then_fresh_ones_lowest_first() -> None:
    pool = BlockPool(8)
    first = pool.take(3, [])
    assert first == [0, 1, 2]
    pool.unpin_many([1, 0])                      # owned, never attached: back to the free list
    assert pool.take(4, []) == [0, 1, 3, 4]      # 0 was handed back last; then the lowest never used
    pool.check()


def test_take_evicts_the_oldest_leaf_and_then_the_rest_of_its_cold_prefix() -> None:
    pool = BlockPool(6)
    old = cached_chain(pool, [11, 12, 13])       # older prompt: LRU leaf 13
    new = cached_chain(pool, [21, 22, 23])       # newer prompt
    assert pool.num_free == 0 and pool.num_reclaimable == 6
    detached: list[int] = []
    got = pool.take(4, detached)
    # the old prompt's whole chain goes, leaf first (each parent becomes the oldest leaf), then the newer leaf
    assert detached == [13, 12, 11, 23]
    assert got == [old[2], old[1], old[0], new[2]]
    assert all(pool.ref_count[b] == 1 and pool.hash[b] is None for b in got)
    assert pool.num_evictions == 4 and pool.num_reclaimable == 2 and list(pool.lru) == [new[1]]
    pool.check()


def test_attach_chain_adopts_blocks_another_request_cached_first_and_frees_ours() -> None:
    pool = BlockPool(8)
    theirs = cached_chain(pool, [1, 2, 3])       # another request completed the same prompt first
    pool.pin(theirs[0])                          # our lease: block 0; we computed blocks 1 and 2 ourselves
    table = [theirs[0], *pool.take(2, [])]
    attached: list[int] = []
    pool.attach_chain(table, [1, 2, 3], 1, 3, attached)
    assert attached == [] and table == theirs    # both adopted (pinned for us), our copies free again
    assert pool.num_free == 5
    pool.unpin_many(reversed(table))
    assert pool.num_reclaimable == 3 and list(pool.lru) == [theirs[2]]
    pool.check()


def test_check_finds_each_kind_of_broken_bookkeeping() -> None:
    """A held prefix (pinned at its middle block) under an evictable leaf, then one field broken at a time:
    the check that every run ends with finds each."""
    def pool_with_a_held_prefix() -> tuple[BlockPool, list[int]]:
        pool = BlockPool(8)
        table = cached_chain(pool, [1, 2, 3])
        pool.pin(table[1])                       # a lease on the first two blocks: 0 and 1 held, 2 evictable
        pool.check()
        return pool, table

    breaks = {
        "held flag of the root": lambda p, t: p.held.__setitem__(t[0], False),
        "held-children count": lambda p, t: p.held_children.__setitem__(t[0], 0),
        "child count": lambda p, t: p.num_children.__setitem__(t[1], 0),
        "reclaimable count": lambda p, t: setattr(p, "num_reclaimable", 0),
        "evictable leaf out of the LRU": lambda p, t: p.lru.pop(t[2]),
        "held block in the LRU": lambda p, t: p.lru.__setitem__(t[1], None),
        "a cached block in the free list": lambda p, t: p._returned.append(t[2]),
    }
    for name, corrupt in breaks.items():
        pool, table = pool_with_a_held_prefix()
        corrupt(pool, table)
        with pytest.raises(AssertionError):
            pool.check()
            raise RuntimeError(f"check missed: {name}")


def test_a_pool_in_use_adds_no_object_per_block_for_the_garbage_collector() -> None:
    # A long-running stage uses every block of its pool; a full collection (which stops the loop) walks
    # every tracked object, so the pool's blocks must not be one each.
    pool = BlockPool(50_000)
    table = pool.take(40_000, [])
    pool.attach_chain(table, list(range(1_000, 41_000)), 0, 40_000, [])
    pool.unpin_many(table)
    pool.check()
    assert pool.num_cached == 40_000 and pool.num_evictable == 1
    assert tracked_within(pool) < 20
