"""One stage's cache contract: lease, escrow, materialize, complete, release.

Accounting invariant (what "never over-commits" means)::

    reserved  <=  free blocks + reclaimable blocks (cached, unpinned)      (checked on every change)

``reserved`` counts the blocks escrow tickets promise and have not yet taken. An escrow is a
count: it takes no block and names no victim. The stage picks the blocks when it materializes a
chunk - a free block first, else the LRU leaf, evicted then. A lease that would pin reclaimable
blocks is allowed only while the inequality still holds afterwards (otherwise it stops there: a
monotone fallback), so every ticket can always be honoured at materialization (pins are
prefix-closed, so a reclaimable block always has an evictable leaf below it).

Why a count and not named victims (DESIGN §2 names them at escrow, "free blocks first, then
unreferenced LRU leaves"): an admission round escrows on every stage at the same moment, but the
stages are at different points of the same wave stream - stage 0 may have completed, and freed
the partial blocks of, requests that stage 3 is still running. Naming victims then evicts
different blocks on different stages, and under pressure the stages' caches drift apart, while
reuse needs a prefix on *all* of them; at materialization every stage sees the same completions
before the same wave (the measurement: docs/structure.md, "Escrow is a count").

A hybrid model's stage (recurrent-state layers beside attention) also keeps state snapshots
(:mod:`runtime.kvcache.state_snapshots`): a lease resumes only where the stage holds one, an escrow
promises the slots a request's state will take, and snapshots count as reclaimable like cached blocks.
"""

from __future__ import annotations

from dataclasses import dataclass

from wavepp.runtime.kvcache.block_pool import BlockPool
from wavepp.runtime.kvcache.followed import DescriptorMismatch, FollowedBlocks
from wavepp.runtime.kvcache.hybrid_states import HybridStates, Lease
from wavepp.runtime.kvcache.state_snapshots import StateSnapshots, StateSpec
from wavepp.runtime.request import cdiv
from wavepp.store.probe import longest_prefix_in


@dataclass(frozen=True, slots=True)
class Mismatch:
    """A chunk the stage refused to prepare (its descriptor disagreed with the stage's state)."""

    reason: str


@dataclass(slots=True)
class CacheStats:
    num_blocks: int
    num_free: int
    num_cached: int
    num_evictable: int
    num_leases: int
    num_escrowed_blocks: int                 # promised to tickets, not yet taken
    num_evictions: int
    num_snapshots: int = 0                   # hybrid stages: recurrent-state snapshots kept
    num_snapshot_blocks: int = 0             # blocks they and running requests' working states occupy


class StageCache(HybridStates):
    """A stage's KV block pool with the operations admission and materialization use."""

    mirrored = False                             # a central manager's mirror (kvcache.pools) says True

    def __init__(self, stage: int, num_blocks: int, block_size: int, state: StateSpec | None = None) -> None:
        """``state``: the stage's recurrent-state layers (a hybrid model), None when it has only attention."""
        self.stage = stage
        self.block_size = block_size
        self.pool = BlockPool(num_blocks)
        self.leases: dict[str, Lease] = {}
        self.tickets: dict[str, int] = {}          # request -> blocks its escrow still promises
        self.tables: dict[str, list[int]] = {}     # materialized block table per request
        self.progress: dict[str, int] = {}         # next token this stage expects per request
        self.reserved = 0                            # Σ tickets
        self.states = StateSnapshots(state) if state is not None else None
        self.working: dict[str, list[int]] = {}    # hybrid: a running request's working-state blocks
        self.state_due: dict[str, int] = {}        # hybrid: blocks of a ticket kept for states, not yet taken
        self.work = 0                                # probes and chain steps (the sim charges for them)
        self.stored: dict[str, int] = {}            # a running request's blocks attached so far (store)
        self.followed = FollowedBlocks(self.stage, self.pool)
        self._attached: list[int] = []              # hint-index updates not yet published
        self._detached: list[int] = []

    # ---- lookup ------------------------------------------------------------------------------
    def prefix_length(self, hashes: list[int], limit: int | None = None) -> int:
        """Longest cached prefix of ``hashes[:limit]``: exponential probe + binary search."""
        n, probes = longest_prefix_in(hashes, self.pool.by_hash, limit)
        self.work += probes
        return n

    def _cached_prefix(self, hashes: list[int], k: int) -> int:
        n, probes = self.pool.cached_prefix(hashes, k)
        self.work += probes
        return n

    def _held_prefix(self, hashes: list[int], end: int) -> int:
        n, probes = self.pool.held_prefix(hashes, end)
        self.work += probes
        return n

    # ---- lease -------------------------------------------------------------------------------
    def lease(self, rid: str, hashes: list[int], k: int, num_tokens: int, follow: tuple[str, int] | None = None) -> int:
        """Pin the prefix ``[0, k)``; returns the boundary actually granted (``<= k``).

        Fewer than ``k`` when the stage evicted part of the prefix after the hint, or when
        holding more of the chain would break an escrow promise. One pin, on block ``k-1``,
        protects the whole prefix; the cost is O(log k) lookups plus the blocks newly held.
        ``follow``: (producer, to) - with all of ``[0, k)`` granted, the lease reaches on to block ``to``
        through the blocks the running producer computes (pinned at the first chunk: :meth:`materialize`).
        """
        if rid in self.leases:
            raise ValueError(f"request {rid} already holds a lease on stage {self.stage}")
        pool = self.pool
        cached = self._cached_prefix(hashes, k)
        if self.states is not None:
            granted, held = self._resumable(hashes, cached)
        else:
            held = self._held_prefix(hashes, cached)
            granted = cached if cached <= held else min(cached, held + max(0, self.available_blocks()))
        boundary = pool.by_hash[hashes[granted - 1]] if granted else -1
        snapshot = None
        if boundary >= 0:
            self.work += granted - held if granted > held else 0
            pool.pin(boundary)
            if self.states is not None:
                snapshot = hashes[granted - 1]
                self.states.pin(snapshot)
        lease = self.leases[rid] = Lease(granted, num_tokens, boundary, snapshot, min(held, granted))
        if follow is not None and granted == k and self.states is None and follow[0] in self.leases:
            lease.producer, lease.followed_from, lease.reuse_blocks = follow[0], k, follow[1]
        self.progress[rid] = lease.reuse_blocks * self.block_size
        return lease.reuse_blocks

    def shrink_lease(self, rid: str, k: int) -> int:
        """Lower the boundary to ``k`` (the leader's minimum over stages); returns the boundary now held:
        ``k``, or on a hybrid stage the largest snapshot boundary at or below it (the leader lowers again)."""
        lease = self.leases[rid]
        if k > lease.reuse_blocks:
            raise ValueError(f"a lease only shrinks: {k} > {lease.reuse_blocks}")
        if k == lease.reuse_blocks:
            return k
        if lease.producer is not None:             # below a followed block: the pinned prefix is all there is
            lease.producer, lease.reuse_blocks = None, lease.followed_from
            self.progress[rid] = lease.reuse_blocks * self.block_size
            if k == lease.reuse_blocks:
                return k
        parent = self.pool.parent
        new = lease.boundary
        for _ in range(lease.reuse_blocks - k):
            new = parent[new]
        snapshot = None
        if self.states is not None:                # walk on up to a boundary this stage can resume at
            new, k, snapshot = self._shrink_to_snapshot(lease.snapshot, new, k)
        if new >= 0:
            self.pool.pin(new)                         # an ancestor of a held block: already held
        self.pool.unpin(lease.boundary)
        lease.boundary, lease.reuse_blocks, lease.snapshot = new, k, snapshot
        lease.held = min(lease.held, k)
        self.progress[rid] = k * self.block_size
        return k

    # ---- escrow ------------------------------------------------------------------------------
    def available_blocks(self) -> int:
        """Blocks an escrow can still claim: free or reclaimable (cached, unpinned snapshots), on no ticket."""
        snapshots = self.states.reclaimable if self.states is not None else 0
        return self.pool.num_free + self.pool.num_reclaimable + snapshots - self.reserved

    def can_escrow(self, num_blocks: int, rid: str | None = None) -> bool:
        """Whether ``num_blocks`` (plus request ``rid``'s state blocks on a hybrid stage) fit."""
        extra = self.state_blocks(rid) if rid is not None else 0
        return num_blocks + extra <= self.available_blocks()

    def escrow(self, rid: str, num_blocks: int) -> None:
        """Promise ``num_blocks`` for the suffix (and a hybrid stage's states): a count, nothing taken yet."""
        if not self._try_escrow(rid, num_blocks):
            raise ValueError(f"stage {self.stage} cannot escrow {num_blocks} blocks for {rid} "
                             f"({self.available_blocks()} available)")

    def _try_escrow(self, rid: str, num_blocks: int) -> bool:
        """:meth:`escrow` where it fits, else False (the request's state blocks counted once: admission)."""
        if rid in self.tickets:
            raise ValueError(f"request {rid} already holds an escrow on stage {self.stage}")
        extra = self.state_blocks(rid)
        if num_blocks + extra > self.available_blocks():
            return False
        if extra:
            self.state_due[rid] = extra
        self.tickets[rid] = num_blocks + extra
        self.reserved += num_blocks + extra
        return True

    def escrow_round(self, items: list[tuple[str, int]], held_prefix: bool = False) -> int:
        """Escrow an admission round's requests in order; returns how many fit (a prefix of ``items``).
        ``held_prefix``: each request's escrow also counts the prefix blocks its lease found held by
        others (:class:`~runtime.mechanisms.reserve.WholePrompt`).

        The first request that does not fit, and every one after it, waits for the next round. Before
        giving up on it the stage drops the leases of the requests behind it (deferred either way; the
        leader's release is idempotent) and tries once more: their pins may be exactly the room it lacks
        (eight 36K-token prompts leased at once on an all-cached pool: none fits although each would
        alone, and with nothing running nothing frees a block - the KV-pressure deadlock). A request
        then waits only for blocks pinned, leased or escrowed by requests admitted before it."""
        if held_prefix:
            items = [(rid, n + (lease.held if (lease := self.leases.get(rid)) else 0)) for rid, n in items]
        for done, (rid, n) in enumerate(items):
            if self._try_escrow(rid, n):
                continue
            behind = [r for r, _ in items[done + 1:] if r in self.leases]
            if not behind:
                return done
            for r in behind:
                self.release(r)
            return done + 1 if self._try_escrow(rid, n) else done
        return len(items)

    # ---- materialize -------------------------------------------------------------------------
    def materialize(self, rid: str, start: int, length: int, reuse_blocks: int) -> list[int]:
        """Turn escrow into real blocks for tokens ``[start, start+length)``; returns the block table.

        Raises :class:`DescriptorMismatch` when the descriptor disagrees with this stage's
        state; the caller fails the request and releases it everywhere.
        """
        lease = self.leases.get(rid)
        if lease is None:
            raise DescriptorMismatch(f"stage {self.stage} holds no lease for request {rid}")
        if lease.reuse_blocks != reuse_blocks:
            raise DescriptorMismatch(
                f"stage {self.stage}: request {rid} planned on {reuse_blocks} reused blocks, "
                f"stage leased {lease.reuse_blocks}"
            )
        if start != self.progress[rid] or length <= 0 or start + length > lease.num_tokens:
            raise DescriptorMismatch(
                f"stage {self.stage}: request {rid} chunk [{start}, {start + length}) does not follow "
                f"token {self.progress[rid]} of {lease.num_tokens}"
            )
        table = self.tables.get(rid)
        need = cdiv(start + length, self.block_size) - len(table if table is not None else lease.reuse_blocks * [0])
        if need > 0 and self.tickets.get(rid, 0) - self.state_due.get(rid, 0) < need:
            raise DescriptorMismatch(f"stage {self.stage}: request {rid} has no escrow for {need} blocks")
        if table is None:                              # first chunk here: the prefix's block table
            table = self.tables[rid] = self.pool.chain(lease.boundary) if lease.boundary >= 0 else []
            if lease.producer is not None:
                table += self.followed.take(rid, lease, self.tables)
            if self.states is not None:                # and the working state, resumed from the snapshot
                self.working[rid] = self._take_state(rid)
        if need > 0:
            table += self._take_promised(rid, need)
        self.progress[rid] = start + length
        return table

    def _take_promised(self, rid: str, n: int) -> list[int]:
        """``n`` blocks of the request's escrow: free ones first, then LRU leaves, evicted now (the
        invariant guarantees enough); on a hybrid stage a leaf's snapshot goes with it, and with no
        evictable leaf left, the oldest unpinned snapshot."""
        self.tickets[rid] -= n
        self.reserved -= n
        if self.states is not None:
            return self._take_with_states(n)
        return self.pool.take(n, self._detached)

    def evict_cached(self, n: int) -> int:
        """Evict up to ``n`` cached blocks nobody holds now, LRU leaves first, to the free list - what
        memory pressure from outside the run does to one stage, so its residency diverges from the
        others' and from the hint index until the next flush. Returns how many. Not on a hybrid stage
        (its leaves carry snapshots: 0)."""
        return 0 if self.states is not None else self.pool.evict_unheld(n, self._detached)

    # ---- completion and release -------------------------------------------------------------
    def store(self, rid: str, hashes: list[int], upto: int) -> int:
        """Attach the running request's full blocks below ``upto`` (executed on every stage) to the tree,
        held by it; stops at a block another request cached first. Not on a hybrid stage. Answers how many."""
        lease, table = self.leases.get(rid), self.tables.get(rid)
        if lease is None or table is None or self.states is not None:
            return 0
        first = self.stored.get(rid, lease.reuse_blocks)
        end = min(upto, len(hashes), lease.num_tokens // self.block_size, len(table))
        self.stored[rid] = self.pool.attach_run(table, hashes, first, max(first, end), self._attached)
        return self.stored[rid] - first

    def complete(self, rid: str, hashes: list[int]) -> None:
        """Attach the request's full blocks to the reuse tree, then drop its references."""
        lease = self.leases.pop(rid)
        table = self.tables.pop(rid, None)
        if table is None:
            table = self.pool.chain(lease.boundary) if lease.boundary >= 0 else []
        pool, k = self.pool, lease.reuse_blocks
        self.stored.pop(rid, None)
        num_full = min(len(hashes), lease.num_tokens // self.block_size)
        # A follower caches the producer's blocks it read like its own (they ran everywhere before its last
        # chunk): the producer may not have completed, or may have adopted another request's copy.
        start = lease.followed_from if lease.producer is not None else k
        keep = max(start, num_full)                # table[start:keep] are pinned by us until the unpin below
        pool.attach_chain(table, hashes, start, keep, self._attached)
        pool.unpin_many(table[keep:])              # partial last block (free, unless a follower reads it)
        self.followed.hand_over(rid, table, self.leases, self.tables)
        if self.states is not None:
            self._keep_snapshots(rid, hashes, k, keep)
            if lease.snapshot is not None:
                self.states.unpin(lease.snapshot)
        pool.unpin_many(reversed(table[start:keep]))
        if lease.boundary >= 0:
            pool.unpin(lease.boundary)
        self._forget(rid)

    def release(self, rid: str) -> bool:
        """Failure path: drop all the request holds here (lease, escrow, new blocks); False if nothing."""
        held = rid in self.leases or rid in self.tables or rid in self.tickets
        lease = self.leases.pop(rid, None)
        table = self.tables.pop(rid, [])
        self._free(self.working.pop(rid, []))
        stored = self.stored.pop(rid, 0)
        if lease is not None:
            k = lease.reuse_blocks
            self.pool.unpin_many(table[max(k, stored):])     # free, unless a follower still reads it
            self.pool.unpin_many(reversed(table[k:stored]))  # stored: computed, they stay cached
            self.followed.release(rid, lease, table)
            if lease.boundary >= 0:
                self.pool.unpin(lease.boundary)
            if lease.snapshot is not None and self.states is not None:
                self.states.unpin(lease.snapshot)
        self._forget(rid)
        return held

    def _forget(self, rid: str) -> None:           # the request's progress and what its escrow still promised
        self.progress.pop(rid, None)
        self.reserved -= self.tickets.pop(rid, 0)
        self.state_due.pop(rid, None)

    # ---- index updates, stats, checks -------------------------------------------------------
    def drain_index_updates(self) -> tuple[list[int], list[int]]:
        """Hashes attached and detached since the last call, for the hint index."""
        out = (self._attached, self._detached)
        self._attached, self._detached = [], []
        return out

    def requeue_index_updates(self, attached: list[int], detached: list[int]) -> None:
        """Put back events a failed publish had drained, ahead of the newer ones."""
        self._attached = attached + self._attached
        self._detached = detached + self._detached

    def stats(self) -> CacheStats:
        p, states = self.pool, self.states
        state_blocks = 0 if states is None else states.num_blocks + sum(map(len, self.working.values()))
        return CacheStats(
            num_blocks=p.num_blocks, num_free=p.num_free, num_cached=p.num_cached,
            num_evictable=p.num_evictable, num_leases=len(self.leases), num_escrowed_blocks=self.reserved,
            num_evictions=p.num_evictions, num_snapshots=0 if states is None else len(states.by_hash),
            num_snapshot_blocks=state_blocks,
        )

    def check(self) -> None:
        """Assert accounting invariants; with no request in flight, every block is free or cached."""
        self.pool.check()
        assert self.reserved == sum(self.tickets.values()) and min(self.tickets.values(), default=0) >= 0
        assert self.available_blocks() >= 0, "escrow over-committed"
        assert all(0 <= self.state_due.get(r, 0) <= n for r, n in self.tickets.items()), "state promise drifted"
        state_blocks = self._check_states() if self.states is not None else set()
        if not self.leases and not self.tickets:
            p = self.pool
            assert not self.working, "a working state leaked"
            assert p.num_free + p.num_cached + len(state_blocks) == p.num_blocks, "blocks leaked"
            assert all(r == 0 for bid, r in enumerate(p.ref_count) if bid not in state_blocks), "a reference leaked"
