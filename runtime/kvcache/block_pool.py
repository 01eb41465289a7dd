"""One stage's block pool and reuse tree.

Every block is in exactly one of these states::

    FREE      handed back (``_returned``) or never used - no hash, no owner
    OWNED     held by one request (being written); not in the tree; ref_count >= 1
    CACHED    in the tree (``by_hash``), keyed by its chained hash, under its parent

A cached block is *held* when it is pinned (``ref_count > 0``) or has a held child. A lease pins
only the deepest block of its prefix; holding propagates to the ancestors, so the whole prefix is
protected by one pin and a lease costs O(log k) lookups plus the part of the chain not already
held by another request (usually nothing under heavy reuse)::

    block:        b0 ── b1 ── b2 ── b3          lease of k=3 pins b2 only
    held:         ✓     ✓     ✓     ·           b3: unheld leaf -> evictable
    held_children 1     1     0     0

Unheld cached blocks are *reclaimable*: evicting leaves one by one frees them all. Unheld leaves
are *evictable* and sit in ``lru`` (oldest first). The escrow's count of promised blocks lives in
:mod:`runtime.kvcache.stage_cache`; the pool evicts only when a stage materializes.

Free blocks come in two kinds: ones handed back (``_returned``, reused last-in first-out) and
ones never used yet (ids ``_fresh`` and up, handed out lowest first). A block's fields are made
the first time it leaves the free list, so a pool of hundreds of thousands of blocks (a simulated
B300 stage) costs nothing to build and its checks cover only blocks in use. The order is that of
one list ``[n-1, ..., _fresh] + _returned`` popped from the end.

A block's fields are columns - one list per field, indexed by block id (``pool.parent[b]``) -
not an object per block: a long-running stage uses every block of its pool, and a full garbage
collection (which stops the loop) walks every tracked object and every reference they hold. Four
pools of 499,200 cached blocks, one full collection (``scripts/bench_pool_gc.py``): 264 ms with an
object a block, 72 ms with a list a field. ``array`` columns (no references to follow) took 24 ms,
but a Mooncake replay ran ~7 % slower with them (an array boxes every int it reads) and held ~35 MB
more at its peak.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable

from wavepp.store.probe import longest_prefix_in


class BlockPool:
    """Blocks, the reuse tree over them, and the LRU of evictable leaves."""

    def __init__(self, num_blocks: int) -> None:
        if num_blocks <= 0:
            raise ValueError(f"a stage needs at least one KV block, got {num_blocks}")
        self.num_blocks = num_blocks
        # One column per field, ids [0, _fresh) (made when first used):
        self.hash: list[int | None] = []         # set while CACHED
        self.parent: list[int] = []              # parent block id while CACHED (-1: first block of a prompt)
        self.ref_count: list[int] = []           # direct pins (a lease's boundary block, an owner)
        self.num_children: list[int] = []        # cached children
        self.held_children: list[int] = []       # cached children that are held
        self.held: list[bool] = []               # ref_count > 0 or held_children > 0 (cached blocks only)
        self._fresh = 0                                               # lowest id never used
        self._returned: list[int] = []                                # free again; pop() reuses the last first
        self.by_hash: dict[int, int] = {}
        self.lru: OrderedDict[int, None] = OrderedDict()              # evictable leaves, oldest first
        self.num_evictions = 0
        self.num_reclaimable = 0                                      # cached and not held

    # ---- queries ---------------------------------------------------------------------------
    @property
    def num_free(self) -> int:
        return len(self._returned) + self.num_blocks - self._fresh

    @property
    def num_evictable(self) -> int:
        return len(self.lru)

    @property
    def num_cached(self) -> int:
        return len(self.by_hash)

    def is_evictable(self, block_id: int) -> bool:
        return block_id in self.lru

    def chain(self, block_id: int) -> list[int]:
        """Block ids from the root down to ``block_id`` (a prompt's block table prefix)."""
        out = []
        parent = self.parent
        while block_id >= 0:
            out.append(block_id)
            block_id = parent[block_id]
        out.reverse()
        return out

    # ---- holding ---------------------------------------------------------------------------
    def _hold(self, b: int) -> None:
        """Cached block ``b`` just became held: it and every newly held ancestor stop being reclaimable.
        Only ``b`` can be in the LRU: an ancestor has a cached child, so it is no leaf."""
        held, parent, held_children = self.held, self.parent, self.held_children
        held[b] = True
        self.lru.pop(b, None)
        newly = 1
        p = parent[b]
        while p >= 0:
            held_children[p] += 1
            if held[p]:
                break
            held[p] = True
            newly += 1
            p = parent[p]
        self.num_reclaimable -= newly

    def pin(self, block_id: int) -> None:
        """Take a reference. The caller checked that holding the unheld ancestry is allowed."""
        self.ref_count[block_id] += 1
        if self.hash[block_id] is not None and not self.held[block_id]:
            self._hold(block_id)

    def unpin(self, block_id: int) -> None:
        self.unpin_many((block_id,))

    def unpin_many(self, block_ids: Iterable[int]) -> None:
        """Drop one reference from each block, in order. A block left unreferenced goes back to the free
        list if it was never attached, else stops being held (with the ancestors held only through it).

        One call for a request's whole chain: per block it is a few column updates, and as separate
        calls the calls themselves were most of the cost."""
        lru, refs, hashes, held = self.lru, self.ref_count, self.hash, self.held
        parent, children, held_children = self.parent, self.num_children, self.held_children
        reclaimed = 0
        for b in block_ids:
            if refs[b] <= 0:
                raise AssertionError(f"unpin of unreferenced block {b}")
            refs[b] -= 1
            if refs[b]:
                continue
            if hashes[b] is None:
                self._returned.append(b)            # an owned block nobody attached: back to free
                continue
            if held_children[b]:
                continue
            while True:                             # b and the ancestors held only through it
                held[b] = False
                reclaimed += 1
                if children[b] == 0:
                    lru[b] = None                   # most recently used end
                p = parent[b]
                if p < 0:
                    break
                held_children[p] -= 1
                if held_children[p] or refs[p]:
                    break
                b = p
        self.num_reclaimable += reclaimed

    def _make(self, first: int, n: int, ref_count: int) -> None:
        """The fields of never-used blocks ``first .. first + n - 1`` (FREE, or OWNED with ``ref_count`` 1)."""
        self.hash.extend([None] * n)
        self.parent.extend([-1] * n)
        self.ref_count.extend([ref_count] * n)
        self.num_children.extend([0] * n)
        self.held_children.extend([0] * n)
        self.held.extend([False] * n)
        self._fresh = first + n

    def take_free(self) -> int:
        """The next free block: the last one handed back, else the lowest never used (IndexError
        when none is left)."""
        if self._returned:
            return self._returned.pop()
        if self._fresh >= self.num_blocks:
            raise IndexError("no free block left")
        bid = self._fresh
        self._make(bid, 1, 0)
        return bid

    def own(self, block_id: int) -> int:
        """Mark a block taken off the free list as OWNED by one request."""
        self.ref_count[block_id] = 1
        return block_id

    # ---- tree --------------------------------------------------------------------------------
    def attach(self, block_id: int, block_hash: int, parent: int) -> None:
        """Make an OWNED block CACHED under ``parent`` (-1 for the first block of a prompt).

        The block stays pinned by its owner, so it is held, and so is its parent chain.
        """
        assert self.hash[block_id] is None and self.ref_count[block_id] >= 1, "only an owned block can be attached"
        self.hash[block_id], self.parent[block_id], self.held[block_id] = block_hash, parent, True
        self.by_hash[block_hash] = block_id
        if parent >= 0:                             # an unheld parent leaves the LRU as _hold holds it
            self.num_children[parent] += 1
            self.held_children[parent] += 1
            if not self.held[parent]:
                self._hold(parent)

    def attach_chain(self, table: list[int], hashes: list[int], start: int, end: int, attached: list[int]) -> None:
        """Cache a completing request's OWNED blocks ``table[start:end]`` as ``hashes[start:end]``, each under
        the one before it (``table[start - 1]``, which the caller holds, or the root). A hash another block
        caches already is adopted: that block is pinned in ours' place, ours unpinned (free, unless a
        follower still reads it), and ``table`` names it from then on; a block cached as itself (stored
        while it ran) passes. Newly attached hashes go to ``attached``. The blocks stay pinned: held."""
        by_hash, hash_of, parent_of = self.by_hash, self.hash, self.parent
        held, children, held_children = self.held, self.num_children, self.held_children
        parent = table[start - 1] if start else -1
        for i in range(start, end):
            bid, h = table[i], hashes[i]
            existing = by_hash.get(h)
            if existing is None:                    # attach(bid, h, parent), inlined: one call a chain
                assert hash_of[bid] is None and self.ref_count[bid] >= 1, "only an owned block can be attached"
                hash_of[bid], parent_of[bid], held[bid] = h, parent, True
                by_hash[h] = bid
                if parent >= 0:                     # held by the caller or by us: in no LRU
                    children[parent] += 1
                    held_children[parent] += 1
                    if not held[parent]:
                        self._hold(parent)
                attached.append(h)
            elif existing != bid:
                # Its parent is ours (held), so at most this one block becomes newly held - and ours comes
                # free: what escrow can count on does not change.
                self.pin(existing)
                self.unpin(bid)
                table[i] = existing
            parent = table[i]

    def evict(self, block_id: int) -> int:
        """Detach an evictable leaf from the tree; the block becomes OWNED by the caller (ref 1).

        Returns the evicted hash (for the hint index)."""
        assert (self.hash[block_id] is not None and not self.held[block_id]
                and self.num_children[block_id] == 0), "not an evictable leaf"
        self.lru.move_to_end(block_id, last=False)
        detached: list[int] = []
        self._evict_oldest(1, detached, [])
        return detached[0]

    def _evict_oldest(self, n: int, detached: list[int], out: list[int]) -> None:
        """Evict the ``n`` oldest evictable leaves in turn (the caller knows there are enough), each OWNED
        by the caller afterwards (ref 1): ids appended to ``out``, hashes to ``detached``. A parent that
        becomes an unheld leaf goes to the *front* of the LRU: the rest of a cold prefix goes before
        warm ones (and is next, when ``n`` reaches it)."""
        lru, by_hash, hashes, parent_of = self.lru, self.by_hash, self.hash, self.parent
        refs, held, children = self.ref_count, self.held, self.num_children
        left = n
        victim = -1                                 # the next victim when a chain continues (else the LRU's oldest)
        while left:
            if victim < 0:
                victim, _ = lru.popitem(last=False)
            h = hashes[victim]
            detached.append(h)                      # type: ignore[arg-type]
            del by_hash[h]                          # type: ignore[arg-type]
            out.append(victim)
            left -= 1
            parent = parent_of[victim]
            hashes[victim], parent_of[victim], refs[victim], held[victim] = None, -1, 1, False
            victim = -1
            if parent >= 0:
                children[parent] -= 1
                if children[parent] == 0 and not held[parent]:
                    if left:
                        victim = parent             # the front of the LRU: next, without going through it
                    else:
                        lru[parent] = None
                        lru.move_to_end(parent, last=False)
        self.num_evictions += n
        self.num_reclaimable -= n

    def release_owned(self, block_id: int) -> None:
        """Give an OWNED block back to the free list."""
        assert self.hash[block_id] is None, "a cached block is released by unpin, not here"
        self.ref_count[block_id] = 0
        self._returned.append(block_id)

    def take(self, n: int, detached: list[int]) -> list[int]:
        """``n`` blocks OWNED by the caller: free ones first (the last handed back first, then the lowest
        never used), then LRU leaves evicted (their hashes appended to ``detached``, for the hint index).
        The caller's accounting guarantees enough."""
        returned, refs = self._returned, self.ref_count
        reused = min(n, len(returned))
        out = returned[len(returned) - reused:]
        out.reverse()
        del returned[len(returned) - reused:]
        for bid in out:
            refs[bid] = 1
        fresh = min(n - reused, self.num_blocks - self._fresh)
        first = self._fresh
        if fresh:
            self._make(first, fresh, 1)
            out.extend(range(first, first + fresh))
        if n > reused + fresh:
            self._evict_oldest(n - reused - fresh, detached, out)
        return out

    def evict_unheld(self, n: int, detached: list[int]) -> int:
        """Evict up to ``n`` cached blocks nobody holds, LRU leaves first, to the free list (hashes appended
        to ``detached``); answers how many. A reclaimable block becomes a free one: what an escrow may
        claim (free + reclaimable) is unchanged."""
        done = 0
        out: list[int] = []
        while done < n and self.lru:
            self._evict_oldest(1, detached, out)   # one at a time: an evicted leaf's parent may be next
            self.release_owned(out.pop())
            done += 1
        return done

    def attach_run(self, table: list[int], hashes: list[int], start: int, end: int, attached: list[int]) -> int:
        """Attach ``table[i]`` as ``hashes[i]`` under ``table[i-1]`` for ``i`` from ``start`` while each is the
        caller's to attach - its hash cached by no other block, its parent in the tree - up to ``end`` (a
        block already attached as itself passes). Newly attached hashes go to ``attached``; answers where
        it stopped."""
        by_hash, hash_of, parent_of = self.by_hash, self.hash, self.parent
        held, children, held_children = self.held, self.num_children, self.held_children
        parent = table[start - 1] if start else -1
        for i in range(start, end):
            bid, h = table[i], hashes[i]
            existing = by_hash.get(h)
            if existing is None:
                if parent >= 0 and hash_of[parent] is None:
                    return i                        # its parent is not in the tree (yet)
                # attach(bid, h, parent), inlined as in attach_chain: a block's call was ~40 % of this
                assert hash_of[bid] is None and self.ref_count[bid] >= 1, "only an owned block can be attached"
                hash_of[bid], parent_of[bid], held[bid] = h, parent, True
                by_hash[h] = bid
                if parent >= 0:
                    children[parent] += 1
                    held_children[parent] += 1
                    if not held[parent]:
                        self._hold(parent)
                attached.append(h)
            elif existing != bid:
                return i
            parent = bid
        return end

    # ---- prefix queries (each answers its probes: the sim charges them) ------------------------
    def cached_prefix(self, hashes: list[int], k: int) -> tuple[int, int]:
        """Longest cached prefix of ``hashes[:k]``, ``k`` a hint: one probe confirms it (prefix-closed)."""
        if k == 0 or hashes[k - 1] in self.by_hash:
            return k, 1
        n, probes = longest_prefix_in(hashes, self.by_hash, k - 1)
        return n, probes + 1

    def held_prefix(self, hashes: list[int], end: int) -> tuple[int, int]:
        """Longest prefix of cached ``hashes[:end]`` already held (holding is prefix-closed on a chain)."""
        held, by_hash = self.held, self.by_hash
        if end == 0 or held[by_hash[hashes[end - 1]]]:
            return end, 1                                  # the usual case under reuse: one probe
        lo, hi, probes = 0, end - 1, 1                     # answer in [lo, hi]
        while lo < hi:
            mid = (lo + hi + 1) // 2
            probes += 1
            if held[by_hash[hashes[mid - 1]]]:
                lo = mid
            else:
                hi = mid - 1
        return lo, probes

    def check(self) -> None:
        """Assert the pool's structural invariants (tests call this after every run). One pass over the
        blocks in use: each cached block's counts are its children's, and its held flag follows from its
        own pin and its held-children count - which, checked at every block, makes every flag right
        (by induction from the leaves)."""
        seen_free = set(self._returned)
        assert len(seen_free) == len(self._returned), "a block is twice in the free list"
        assert all(bid < self._fresh for bid in seen_free), "a never-used block was handed back"
        columns = (self.hash, self.parent, self.ref_count, self.num_children, self.held_children, self.held)
        assert all(len(c) == self._fresh for c in columns), "a column's length is not the blocks in use"
        by_hash, lru, hashes, parent, held = self.by_hash, self.lru, self.hash, self.parent, self.held
        children = [0] * self.num_blocks
        held_children = [0] * self.num_blocks
        for bid in by_hash.values():
            h = hashes[bid]
            assert bid not in seen_free and h is not None and by_hash[h] == bid
            assert held[bid] == (self.ref_count[bid] > 0 or self.held_children[bid] > 0), f"held flag of block {bid}"
            p = parent[bid]
            if p >= 0:
                assert hashes[p] is not None, "cached block under an uncached parent"
                children[p] += 1
                held_children[p] += held[bid]
        reclaimable = 0
        for bid in range(self._fresh):
            evictable = bid in lru
            if hashes[bid] is None:
                assert not evictable
                continue
            assert self.num_children[bid] == children[bid], f"child count of block {bid}"
            assert self.held_children[bid] == held_children[bid], f"held-children count of block {bid}"
            reclaimable += not held[bid]
            assert (not held[bid] and self.num_children[bid] == 0) == evictable, f"evictability of {bid}"
        assert reclaimable == self.num_reclaimable, "reclaimable count drifted"
