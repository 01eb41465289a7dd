"""One stage's block pool and reuse tree.

Every block is in exactly one of these states::

    FREE      in ``free`` - no hash, no owner
    OWNED     held by one request (being written); not in the tree; ref_count >= 1
    CACHED    in the tree (``by_hash``); ref_count >= 0 (leases pin it)
              evictable  <=>  ref_count == 0 and no cached child  (an unreferenced leaf)

The tree is keyed by the chained block hash, so a hash names its whole prefix and residency is
prefix-closed: a block is only attached under a cached parent and only leaves are evicted.

Leases pin whole prefixes (blocks ``[0, k)``), so pins are prefix-closed: an unpinned cached
block has no pinned descendant, and every unpinned cached block can be reclaimed by evicting
leaves one by one. ``num_reclaimable`` counts them; it is what escrow may promise.

Evictable blocks sit in ``lru`` (oldest first). A block can also be *named* as an escrow victim
(``named``): still cached and still a hit for other requests, but set aside for eviction. The
escrow bookkeeping lives in :mod:`runtime.kvcache.stage_cache`; this module only keeps the sets.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass


@dataclass(slots=True)
class Block:
    id: int
    hash: int | None = None      # set while CACHED
    parent: int = -1             # parent block id while CACHED (-1: first block of a prompt)
    ref_count: int = 0
    num_children: int = 0        # cached children


class BlockPool:
    """Blocks, the reuse tree over them, and the LRU of unreferenced leaves."""

    def __init__(self, num_blocks: int) -> None:
        if num_blocks <= 0:
            raise ValueError(f"a stage needs at least one KV block, got {num_blocks}")
        self.num_blocks = num_blocks
        self.blocks = [Block(i) for i in range(num_blocks)]
        self.free: list[int] = list(range(num_blocks - 1, -1, -1))   # pop() hands out low ids first
        self.by_hash: dict[int, int] = {}
        self.lru: OrderedDict[int, None] = OrderedDict()              # evictable, not named; oldest first
        self.named: dict[int, str] = {}                               # evictable, named victim -> request id
        self.num_evictions = 0
        self.num_reclaimable = 0                                      # cached with ref_count == 0

    # ---- queries ---------------------------------------------------------------------------
    @property
    def num_free(self) -> int:
        return len(self.free)

    @property
    def num_evictable(self) -> int:
        return len(self.lru) + len(self.named)

    @property
    def num_cached(self) -> int:
        return len(self.by_hash)

    def is_evictable(self, block_id: int) -> bool:
        return block_id in self.lru or block_id in self.named

    def prefix_length(self, hashes: list[int], limit: int | None = None) -> int:
        """Longest ``n`` such that ``hashes[:n]`` are all cached here (residency is prefix-closed)."""
        end = len(hashes) if limit is None else min(limit, len(hashes))
        by_hash = self.by_hash
        for i in range(end):
            if hashes[i] not in by_hash:
                return i
        return end

    # ---- reference counts ------------------------------------------------------------------
    def pin(self, block_id: int) -> None:
        """Take a reference. The caller checked that removing an evictable block is allowed."""
        b = self.blocks[block_id]
        if b.ref_count == 0:
            self.lru.pop(block_id, None)
            self.named.pop(block_id, None)
            if b.hash is not None:
                self.num_reclaimable -= 1
        b.ref_count += 1

    def unpin(self, block_id: int) -> None:
        b = self.blocks[block_id]
        if b.ref_count <= 0:
            raise AssertionError(f"unpin of unreferenced block {block_id}")
        b.ref_count -= 1
        if b.ref_count == 0:
            if b.hash is None:
                self.free.append(block_id)          # an owned block nobody attached: back to free
                return
            self.num_reclaimable += 1
            if b.num_children == 0:
                self.lru[block_id] = None           # most recently used end

    def take_free(self) -> int:
        return self.free.pop()

    def own(self, block_id: int) -> int:
        """Mark a block taken off the free list as OWNED by one request."""
        self.blocks[block_id].ref_count = 1
        return block_id

    # ---- tree --------------------------------------------------------------------------------
    def attach(self, block_id: int, block_hash: int, parent: int) -> None:
        """Make an OWNED block CACHED under ``parent`` (-1 for the first block of a prompt)."""
        b = self.blocks[block_id]
        assert b.hash is None and b.ref_count >= 1, "only an owned block can be attached"
        b.hash, b.parent = block_hash, parent
        self.by_hash[block_hash] = block_id
        if parent >= 0:
            p = self.blocks[parent]
            if p.num_children == 0 and p.ref_count == 0:
                self.lru.pop(parent, None)
                self.named.pop(parent, None)
            p.num_children += 1

    def evict(self, block_id: int) -> int:
        """Detach an evictable leaf from the tree; the block becomes OWNED by the caller (ref 1).

        Returns the evicted hash (for the hint index). A parent that becomes an unreferenced
        leaf goes to the *front* of the LRU: the rest of a cold prefix goes before warm ones.
        """
        b = self.blocks[block_id]
        assert b.hash is not None and b.ref_count == 0 and b.num_children == 0, "not an evictable leaf"
        self.lru.pop(block_id, None)
        self.named.pop(block_id, None)
        evicted = b.hash
        del self.by_hash[evicted]
        if b.parent >= 0:
            p = self.blocks[b.parent]
            p.num_children -= 1
            if p.num_children == 0 and p.ref_count == 0:
                self.lru[b.parent] = None
                self.lru.move_to_end(b.parent, last=False)
        b.hash, b.parent, b.ref_count = None, -1, 1
        self.num_evictions += 1
        self.num_reclaimable -= 1
        return evicted

    def release_owned(self, block_id: int) -> None:
        """Give an OWNED block back to the free list."""
        b = self.blocks[block_id]
        assert b.hash is None, "a cached block is released by unpin, not here"
        b.ref_count = 0
        self.free.append(block_id)

    def check(self) -> None:
        """Assert the pool's structural invariants (tests call this after every run)."""
        seen_free = set(self.free)
        assert len(seen_free) == len(self.free), "a block is twice in the free list"
        children = [0] * self.num_blocks
        for h, bid in self.by_hash.items():
            b = self.blocks[bid]
            assert b.hash == h and bid not in seen_free
            if b.parent >= 0:
                assert self.blocks[b.parent].hash is not None, "cached block under an uncached parent"
                children[b.parent] += 1
        unpinned = sum(1 for bid in self.by_hash.values() if self.blocks[bid].ref_count == 0)
        assert unpinned == self.num_reclaimable, "reclaimable count drifted"
        for b in self.blocks:
            if b.hash is not None:
                assert b.num_children == children[b.id], f"child count of block {b.id}"
                evictable = b.ref_count == 0 and b.num_children == 0
                assert evictable == self.is_evictable(b.id), f"evictability of block {b.id}"
            else:
                assert not self.is_evictable(b.id)
