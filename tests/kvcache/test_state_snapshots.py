"""Hybrid stages: recurrent-state snapshots - where a lease may resume, what an escrow promises,
how snapshots are pinned, shared and evicted, and the cross-stage boundary rule (DESIGN §2)."""

from __future__ import annotations

import asyncio
import random
from array import array

import pytest

from wavepp.runtime.admission import Admission
from wavepp.runtime.kvcache.handle import StageHandle
from wavepp.runtime.kvcache.hashing import block_hashes
from wavepp.runtime.kvcache.stage_cache import StageCache
from wavepp.runtime.kvcache.state_snapshots import StateSpec
from wavepp.runtime.mechanisms.reuse_lookup import FirstStageTree
from wavepp.runtime.request import Request
from wavepp.store.memory import MemoryStore
from wavepp.telemetry.setup import Telemetry

B = 4
SPEC = StateSpec(slot_blocks=2, interval_blocks=4)      # a snapshot every 16 tokens, 2 blocks each


def hashes_of(seed: int, num_blocks: int) -> list[int]:
    rng = random.Random(seed)
    return block_hashes([rng.randrange(1000) for _ in range(num_blocks * B)], B)


def compute(c: StageCache, rid: str, hashes: list[int], num_tokens: int, k: int) -> int:
    """Lease at ``k``, escrow, compute in one chunk, complete; returns the boundary the stage granted."""
    k = c.lease(rid, hashes, k, num_tokens)
    need = -(-(num_tokens - k * B) // B)
    assert c.can_escrow(need, rid)
    c.escrow(rid, need)
    c.materialize(rid, k * B, num_tokens - k * B, k)
    c.check()
    c.complete(rid, hashes)
    c.check()
    return k


def test_a_stage_resumes_only_at_a_snapshot_boundary() -> None:
    """10 cached blocks, snapshots after blocks 4 and 8 (the interval) and 10 (where the prompt ended): a
    lease of 10 is granted 10, of 9 granted 8, of 7 granted 4."""
    c = StageCache(0, 64, B, SPEC)
    h = hashes_of(1, 10)
    compute(c, "a", h, 10 * B + 1, 0)
    assert c.prefix_length(h) == 10
    assert sorted(c.states.by_hash) == sorted([h[3], h[7], h[9]])  # type: ignore[union-attr]
    assert c.lease("b", h, 10, 10 * B + 1) == 10
    assert c.lease("c", h, 9, 9 * B + 1) == 8
    assert c.lease("d", h, 7, 7 * B + 1) == 4
    assert [c.leases[r].snapshot for r in "bcd"] == [h[9], h[7], h[3]]
    c.check()
    for r in "bcd":
        c.release(r)
    c.check()


def test_escrow_promises_the_working_state_and_each_new_snapshot() -> None:
    """A 10-block prompt from scratch: 11 KV blocks (10 full + the partial one), a working state (its end
    snapshot after block 10) and two snapshots (after blocks 4 and 8) of 2 blocks each; from a resume at 10,
    the working state alone."""
    c = StageCache(0, 64, B, SPEC)
    h = hashes_of(2, 10)
    c.lease("a", h, 0, 10 * B + 1)
    assert c.state_blocks("a") == 2 * (1 + 2)
    c.escrow("a", 11)
    assert c.reserved == 11 + 6
    c.materialize("a", 0, 10 * B + 1, 0)
    assert c.stats().num_snapshot_blocks == 2            # the working state, taken at the first chunk
    c.complete("a", h)
    c.check()
    st = c.stats()
    assert (st.num_snapshots, st.num_snapshot_blocks, c.reserved) == (3, 6, 0)
    assert st.num_free == 64 - 10 - 6                    # the partial block came back; the working state stays
    c.lease("b", h, 10, 10 * B + 3)
    assert c.state_blocks("b") == 2


def test_an_escrow_that_cannot_hold_the_states_waits() -> None:
    """The KV suffix alone would fit; with the states it does not, so the request is refused."""
    c = StageCache(0, 11, B, SPEC)
    h = hashes_of(3, 8)
    c.lease("a", h, 0, 8 * B)                            # 8 KV blocks + working 2 + a snapshot at 4: 12 > 11
    assert c.can_escrow(8) and not c.can_escrow(8, "a")
    assert c.escrow_round([("a", 8)]) == 0
    c.release("a")
    c.check()


def test_pinned_snapshots_survive_pressure_and_unpinned_ones_go_alone() -> None:
    """A pinned snapshot is never evicted; with no evictable leaf left, an unpinned snapshot of a held
    chain is evicted on its own - that stage then resumes lower, where it still holds one."""
    c = StageCache(0, 25, B, SPEC)
    h = hashes_of(4, 8)
    compute(c, "a", h, 8 * B, 0)                         # 8 blocks + snapshots at 4 and 8 (its end): 12 used
    assert c.lease("hold", h, 8, 8 * B + 1) == 8         # pins the chain and the snapshot at 8
    other = hashes_of(5, 9)
    assert c.available_blocks() == 25 - 8 - 2            # the held chain and its pinned snapshot stay out
    compute(c, "x", other, 9 * B, 0)                     # 9 KV + working + snapshots at 4 and 8: the last 2
    assert h[3] not in c.states.by_hash and h[7] in c.states.by_hash  # type: ignore[union-attr]
    assert c.prefix_length(h) == 8                       # come from the unpinned snapshot at 4; its KV stays
    c.release("hold")
    assert c.lease("y", h, 6, 6 * B + 1) == 0             # the snapshot at 4 is gone here
    c.release("y")
    c.check()


def test_evicting_a_leaf_drops_the_snapshot_that_follows_it() -> None:
    c = StageCache(0, 18, B, SPEC)
    h = hashes_of(6, 4)
    compute(c, "a", h, 4 * B, 0)                         # 4 blocks + its end snapshot after block 4 (2 blocks)
    assert c.stats().num_snapshots == 1
    other = hashes_of(7, 12)
    compute(c, "b", other, 11 * B, 0)                    # 11 blocks + working 2 + snapshots at 4, 8 (4)
    assert c.stats().num_snapshots == 3 and h[3] not in c.states.by_hash  # type: ignore[union-attr]
    c.check()


def test_two_requests_share_one_snapshot() -> None:
    c = StageCache(0, 64, B, SPEC)
    h = hashes_of(8, 4)
    c.lease("a", h, 0, 4 * B)
    c.lease("b", h, 0, 4 * B)
    for rid in ("a", "b"):
        c.escrow(rid, 4)
        c.materialize(rid, 0, 4 * B, 0)
    c.complete("a", h)
    c.complete("b", h)
    c.check()
    assert c.stats().num_snapshots == 1 and c.stats().num_snapshot_blocks == 2


def test_shrinking_walks_down_to_a_boundary_the_stage_holds() -> None:
    c = StageCache(0, 64, B, SPEC)
    h = hashes_of(9, 12)
    compute(c, "a", h, 12 * B + 1, 0)
    assert c.lease("b", h, 12, 12 * B + 1) == 12
    assert c.shrink_lease("b", 10) == 8
    assert c.leases["b"].snapshot == h[7]
    c.check()
    assert c.shrink_lease("b", 3) == 0 and c.leases["b"].snapshot is None
    c.release("b")
    c.check()


def test_the_boundary_is_the_largest_one_held_on_every_stage() -> None:
    """Stage 0 keeps snapshots after blocks 4, 8 and 12 (the end); stage 1 evicted the one after 12, stage 2
    the one after 8: the boundary is 4, the largest held on every stage, found by lowering until all agree."""
    h = hashes_of(10, 12)
    caches = [StageCache(s, 64, B, SPEC) for s in range(3)]
    for c in caches:
        compute(c, "warm", h, 12 * B + 1, 0)
    for c, gone in ((caches[1], 11), (caches[2], 7)):
        assert c.states is not None
        c._free(c.states.drop(h[gone]))
        c.check()
    handles = [StageHandle(c) for c in caches]
    tel = Telemetry(lambda: 0.0, 0)
    admission = Admission(handles, [0, 1, 2], MemoryStore(), B, tel, FirstStageTree())
    r = Request("r", array("I", range(12 * B + 1)), 0.0, h)
    result = asyncio.run(admission.round([r]))
    [a] = result.admitted
    assert a.reuse_blocks == 4
    assert [c.leases["r"].reuse_blocks for c in caches] == [4, 4, 4]
    assert r.fallbacks == 1
    for c in caches:
        c.check()


@pytest.mark.parametrize("interval", [1, 3, 64])
def test_any_interval_keeps_the_accounting(interval: int) -> None:
    spec = StateSpec(slot_blocks=3, interval_blocks=interval)
    c = StageCache(0, 48, B, spec)
    rng = random.Random(interval)
    for i in range(40):
        h = hashes_of(rng.randrange(6), 10)
        n = rng.randrange(1, 10 * B + 1)
        k = c.lease(f"r{i}", h, c.prefix_length(h, (n - 1) // B), n)
        need = -(-(n - k * B) // B)
        if not c.can_escrow(need, f"r{i}"):
            c.release(f"r{i}")
            continue
        c.escrow(f"r{i}", need)
        c.materialize(f"r{i}", k * B, n - k * B, k)
        c.complete(f"r{i}", h)
        c.check()
    st = c.stats()
    assert st.num_free + st.num_cached + st.num_snapshot_blocks == 48
