"""Stateful property test of the stage caches: several stages of uneven capacity run the same
requests the way the runtime does - one lookup over all stages, a lease on each lowered to their
minimum, an escrow on each (a request that does not fit everywhere is released everywhere), then
every stage materializes, completes or drops each request on its own schedule (stages lag each
other) - under random interleavings, with cancellations at any point.

After every step: each stage's own accounting (:meth:`StageCache.check`), a leased prefix still
cached on every stage with the request's hashes, no block in two requests' tables unless it is a
shared cached prefix, a table's new blocks owned, and the linear walk agreeing with the binary
search the runtime uses (residency is prefix-closed). At the end every request is drained and no
lease, escrow, table or reference remains. Half the examples are a hybrid model's stages: each keeps
recurrent-state snapshots of its own size at a common interval (``runtime.kvcache.state_snapshots``); a lease
resumes only at a snapshot it holds and pins it, the leader lowers until every stage agrees, and no state block
is ever in a request's table or in the tree.

The example count comes from the hypothesis profile: ``make test`` runs the suite's default, ``make
test-reliability`` the ``reliability`` profile (``tests/conftest.py``).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from wavepp.runtime.kvcache.hashing import block_hashes
from wavepp.runtime.kvcache.stage_cache import StageCache
from wavepp.runtime.kvcache.state_snapshots import StateSpec
from wavepp.runtime.request import cdiv
from wavepp.store.probe import longest_prefix_in, longest_prefix_linear

B = 4                       # tokens per block: small pools, many evictions


@dataclass
class Req:
    rid: str
    tokens: list[int]
    hashes: list[int]
    k: int                                            # the agreed reuse boundary (blocks)
    done: list[int] = field(default_factory=list)     # per stage: tokens materialized
    completed: set[int] = field(default_factory=set)  # stages that completed it

    @property
    def num_tokens(self) -> int:
        return len(self.tokens)


class StageCaches(RuleBasedStateMachine):
    """One leader, ``P`` stages; prompts from a few shared documents so prefixes collide."""

    def __init__(self) -> None:
        super().__init__()
        self.stages: list[StageCache] = []
        self.live: dict[str, Req] = {}
        self.n = 0
        self.docs: list[list[int]] = []

    @initialize(caps=st.lists(st.integers(6, 24), min_size=2, max_size=4), seed=st.integers(0, 2**16),
                slots=st.none() | st.tuples(st.integers(1, 3), st.lists(st.integers(1, 3), min_size=4, max_size=4)))
    def build(self, caps: list[int], seed: int, slots: tuple[int, list[int]] | None) -> None:
        specs = [None if slots is None else StateSpec(slots[1][s], slots[0]) for s in range(len(caps))]
        self.stages = [StageCache(s, c, B, spec) for s, (c, spec) in enumerate(zip(caps, specs, strict=False))]
        rng = random.Random(seed)
        self.docs = [[rng.randrange(50) for _ in range(6 * B)] for _ in range(3)]

    # ---- admission ---------------------------------------------------------------------------
    @rule(doc=st.integers(0, 2), shared=st.integers(0, 6 * B), suffix=st.integers(1, 3 * B), salt=st.integers(0, 3))
    def admit(self, doc: int, shared: int, suffix: int, salt: int) -> None:
        tokens = self.docs[doc][:shared] + [100 + salt] * suffix
        hashes = block_hashes(tokens, B)
        limit = (len(tokens) - 1) // B
        rid = f"r{self.n}"
        self.n += 1
        hint = min(c.prefix_length(hashes, limit) for c in self.stages)
        k = min(c.lease(rid, hashes, hint, len(tokens)) for c in self.stages)
        while True:                                   # the leader lowers until every stage agrees
            held = [c.shrink_lease(rid, k) for c in self.stages]
            if min(held) == k:
                break
            k = min(held)
        need = cdiv(len(tokens) - k * B, B)
        if not all(c.can_escrow(need, rid) for c in self.stages):
            for c in self.stages:
                assert c.release(rid)
            return
        for c in self.stages:
            c.escrow(rid, need)
        self.live[rid] = Req(rid, tokens, hashes, k, [k * B] * len(self.stages))

    # ---- per-stage progress ------------------------------------------------------------------
    def _on_stage(self, pick: int, stage: int) -> Req | None:
        open_ = [r for r in self.live.values() if stage not in r.completed]
        return open_[pick % len(open_)] if open_ else None

    @rule(pick=st.integers(0, 50), stage=st.integers(0, 3), length=st.integers(1, 3 * B))
    def materialize(self, pick: int, stage: int, length: int) -> None:
        stage %= len(self.stages)
        r = self._on_stage(pick, stage)
        if r is None or r.done[stage] >= r.num_tokens:
            return
        start = r.done[stage]
        length = min(length, r.num_tokens - start)
        table = self.stages[stage].materialize(r.rid, start, length, r.k)
        r.done[stage] = start + length
        assert len(table) == cdiv(start + length, B)

    @rule(pick=st.integers(0, 50), stage=st.integers(0, 3))
    def complete(self, pick: int, stage: int) -> None:
        stage %= len(self.stages)
        r = self._on_stage(pick, stage)
        if r is None or r.done[stage] < r.num_tokens:
            return
        self.stages[stage].complete(r.rid, r.hashes)
        r.completed.add(stage)
        if len(r.completed) == len(self.stages):
            del self.live[r.rid]

    @rule(pick=st.integers(0, 50))
    def cancel(self, pick: int) -> None:
        """A client gave up: the request is released on every stage that has not completed it."""
        if not self.live:
            return
        r = list(self.live.values())[pick % len(self.live)]
        for s, c in enumerate(self.stages):
            if s not in r.completed:
                assert c.release(r.rid)
        del self.live[r.rid]

    # ---- invariants --------------------------------------------------------------------------
    @invariant()
    def accounting_holds(self) -> None:
        for c in self.stages:
            c.check()

    @invariant()
    def leased_prefixes_stay_cached(self) -> None:
        for r in self.live.values():
            for s, c in enumerate(self.stages):
                if s in r.completed:
                    continue
                lease = c.leases[r.rid]
                assert lease.reuse_blocks == r.k
                chain = c.pool.chain(lease.boundary) if lease.boundary >= 0 else []
                assert [c.pool.hash[b] for b in chain] == r.hashes[:r.k], (s, r.rid)

    @invariant()
    def no_block_is_owned_twice(self) -> None:
        for c in self.stages:
            owned: dict[int, str] = {}
            for rid, table in c.tables.items():
                k = c.leases[rid].reuse_blocks
                for bid in table[k:]:               # the request's own blocks (the prefix is shared)
                    assert bid not in owned, f"block {bid} in {owned.get(bid)} and {rid}"
                    owned[bid] = rid
                    assert c.pool.hash[bid] is None and c.pool.ref_count[bid] == 1

    @invariant()
    def states_stay_out_of_tables_and_the_tree_and_leases_pin_theirs(self) -> None:
        for c in self.stages:
            if c.states is None:
                continue
            state = {b for snap in c.states.by_hash.values() for b in snap.blocks}
            state |= {b for blocks in c.working.values() for b in blocks}
            assert not state & {b for table in c.tables.values() for b in table}
            for rid, lease in c.leases.items():
                r = self.live.get(rid)
                if r is not None and lease.reuse_blocks:
                    assert lease.snapshot == r.hashes[lease.reuse_blocks - 1]
                    assert c.states.by_hash[lease.snapshot].pins > 0

    @invariant()
    def the_binary_search_counts_what_a_walk_counts(self) -> None:
        for r in list(self.live.values())[:3]:
            for c in self.stages:
                fast, _ = longest_prefix_in(r.hashes, c.pool.by_hash)
                assert fast == longest_prefix_linear(r.hashes, c.pool.by_hash.__contains__)

    def teardown(self) -> None:
        for r in list(self.live.values()):
            for s, c in enumerate(self.stages):
                if s not in r.completed:
                    c.release(r.rid)
        for c in self.stages:
            c.check()
            assert not c.leases and not c.tickets and not c.tables and not c.progress and c.reserved == 0
            assert not c.working and not c.state_due


TestStageCaches = StageCaches.TestCase
