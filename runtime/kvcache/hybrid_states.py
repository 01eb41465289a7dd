"""The part of a stage's cache that only a hybrid model's stage runs: its recurrent-state snapshots'
leases, escrow, taking and keeping (:mod:`runtime.kvcache.state_snapshots` holds the snapshots themselves).

A mixin of :class:`runtime.kvcache.stage_cache.StageCache`, which calls these only when its ``states`` is
set; kept apart so that the stage cache reads as the attention-only contract it is for every other model.
"""

from __future__ import annotations

from dataclasses import dataclass

from wavepp.runtime.kvcache.block_pool import BlockPool
from wavepp.runtime.kvcache.state_snapshots import StateSnapshots


@dataclass(slots=True)
class Lease:
    reuse_blocks: int
    num_tokens: int
    boundary: int                # pinned block holding tokens up to k*B (-1 when k == 0)
    snapshot: int | None = None  # hybrid stage: hash keying the pinned state snapshot at k (None when k == 0)
    held: int = 0                # of the k blocks, those other requests already held when this lease came
    producer: str | None = None  # a follower's: the request computing blocks [followed_from, k), pinned
    followed_from: int = 0       # by the follower when its first chunk is prepared here


class HybridStates:
    """Snapshot accounting for :class:`StageCache` (the attributes below are the cache's)."""

    pool: BlockPool
    states: StateSnapshots | None
    leases: dict[str, Lease]
    working: dict[str, list[int]]
    state_due: dict[str, int]
    block_size: int
    work: int
    _detached: list[int]

    def available_blocks(self) -> int:
        raise NotImplementedError

    def _held_prefix(self, hashes: list[int], end: int) -> int:
        raise NotImplementedError

    def _take_promised(self, rid: str, n: int) -> list[int]:
        raise NotImplementedError

    def _resumable(self, hashes: list[int], cached: int) -> tuple[int, int]:
        """A hybrid stage's grant within the cached ``hashes[:cached]``: the largest snapshot boundary whose
        pins (the chain's unheld part and the snapshot itself) escrow promises still leave room for;
        with the held prefix there. (0, 0) when none."""
        assert self.states is not None
        states, room = self.states, self.available_blocks()
        j = states.resume_point(hashes, cached)
        while j > 0:
            held = self._held_prefix(hashes, j)
            if (j - held) + states.needs_room(hashes[j - 1]) <= room:
                return j, held
            j = states.resume_point(hashes, j - 1)
        return 0, 0

    def _shrink_to_snapshot(self, pinned: int | None, new: int, k: int) -> tuple[int, int, int | None]:
        """A shrinking lease's walk up from block ``new`` (boundary ``k``) to the nearest boundary where this
        stage keeps a snapshot it may pin; unpins ``pinned`` (the lease's old one) and pins the new one.
        Returns (block, boundary, snapshot hash or None at 0)."""
        assert self.states is not None
        states, hashes, parent = self.states, self.pool.hash, self.pool.parent
        if pinned is not None:
            states.unpin(pinned)

        def resumes(block: int) -> bool:     # a snapshot follows it, and pinning it breaks no promise
            h = hashes[block]
            return h in states.by_hash and states.needs_room(h) <= self.available_blocks()

        while k > 0 and not resumes(new):
            new, k = parent[new], k - 1
            self.work += 1
        if k == 0:
            return new, 0, None
        snapshot = hashes[new]
        assert snapshot is not None
        states.pin(snapshot)
        return new, k, snapshot

    def state_blocks(self, rid: str) -> int:
        """Blocks a hybrid stage keeps for a leased request's states beside its KV suffix: its working
        state (its end snapshot once it completes), and a snapshot at each interval boundary between its reuse
        boundary and its end (0 without state layers)."""
        lease = self.leases.get(rid)
        if self.states is None or lease is None:
            return 0
        spec = self.states.spec
        new = spec.positions(lease.reuse_blocks, lease.num_tokens // self.block_size)
        return spec.slot_blocks * (1 + len(new))

    def _take_with_states(self, n: int) -> list[int]:
        """``n`` blocks (the caller took them off the request's escrow): free ones first, then LRU leaves - a
        leaf's snapshot goes with it - and with no evictable leaf left, the oldest unpinned snapshot."""
        pool, states = self.pool, self.states
        assert states is not None
        out: list[int] = []
        while len(out) < n:
            if pool.num_free:
                out.append(pool.own(pool.take_free()))
            elif pool.lru:
                victim = next(iter(pool.lru))
                evicted = pool.evict(victim)
                self._detached.append(evicted)
                out.append(victim)
                if evicted in states.by_hash:
                    self._free(states.drop(evicted))
            else:
                self._free(states.drop(states.oldest()))
        return out

    def _take_state(self, rid: str) -> list[int]:
        """One state's blocks out of the request's escrow (its working state, or a snapshot)."""
        assert self.states is not None
        n = self.states.spec.slot_blocks
        self.state_due[rid] -= n
        return self._take_promised(rid, n)

    def _free(self, blocks: list[int]) -> None:
        for bid in blocks:
            self.pool.release_owned(bid)

    def _keep_snapshots(self, rid: str, hashes: list[int], k: int, attached: int) -> None:
        """A hybrid stage keeps the states the request passed at each interval boundary in ``(k, attached)``
        and its working state as the snapshot at its last attached block (those blocks just attached and
        still pinned by it); one already kept there by another request stays, ours is freed."""
        assert self.states is not None
        states = self.states
        for j in states.spec.positions(k, attached):
            if hashes[j - 1] not in states.by_hash:
                states.add(hashes[j - 1], self._take_state(rid))
        working = self.working.pop(rid, [])
        if attached > k and working and hashes[attached - 1] not in states.by_hash:
            states.add(hashes[attached - 1], working)
        else:
            self._free(working)

    def _check_states(self) -> set[int]:
        """Assert the snapshots' accounting against the leases; returns every block states hold."""
        assert self.states is not None
        pins: dict[int, int] = {}
        for lease in self.leases.values():
            if lease.snapshot is not None:
                pins[lease.snapshot] = pins.get(lease.snapshot, 0) + 1
        self.states.check(self.pool.by_hash, pins)
        held = {b for s in self.states.by_hash.values() for b in s.blocks}
        held.update(b for blocks in self.working.values() for b in blocks)
        assert all(self.pool.hash[b] is None for b in held), "a state block is in the tree"
        return held
