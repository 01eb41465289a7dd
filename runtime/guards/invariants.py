"""The runtime's invariants, checked in one place: by the tests, by every bench after each run, and
while a run goes with ``--check-invariants`` (``bench`` and ``serve``).

While requests are in flight (checked after every wave retires, :func:`check_running`):

* each stage's own accounting (:meth:`StageCache.check`): no block twice in the free list, no block
  both free and cached, reference and held counts that match the tree, never negative, a cached
  block always under a cached parent (residency is prefix-closed), and escrow never more than
  free plus reclaimable blocks;
* a leased prefix is still cached: each live request's lease on each stage that admitted it still
  pins a chain of exactly its boundary's length (a leased block was never evicted).

When the run has drained (:func:`check_drained`):

* no lease, escrow, block table, reference or request state remains on any stage, and every block
  is free or cached;
* the runtime's own books are empty: no waiting, admitted or in-flight request, no block counted
  as being computed, no lease-registry entry of this leader in the store;
* the hint index agrees with the stages: after a last flush, each stage's entry count in the store
  equals what the stage caches, and every hash the stage caches is resident there;
* no task of the run is left behind on the event loop.

A violation raises :class:`InvariantViolation` naming the invariant and where it broke.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence
from typing import Protocol

from wavepp.runtime.control.index_publisher import IndexPublisher
from wavepp.runtime.control.plane import LeaseRegistry
from wavepp.runtime.kvcache.handle import StageHandle, on_stages
from wavepp.runtime.kvcache.stage_cache import StageCache
from wavepp.runtime.run_state import RunState
from wavepp.store.base import Store


class PipelineLoop(Protocol):
    """What the checks read of a running loop (:class:`runtime.loop.PipelineLoop`)."""

    handles: list[StageHandle]
    run_state: RunState
    store: Store
    publisher: IndexPublisher
    registry: LeaseRegistry


class InvariantViolation(AssertionError):
    """An invariant of the runtime does not hold (the message names which, and where)."""


async def check_stages(handles: Sequence[StageHandle]) -> None:
    """Every stage's cache accounting (and, with nothing in flight there, that nothing leaked)."""
    for h in handles:
        try:
            await h.check()
        except AssertionError as exc:
            raise InvariantViolation(f"stage {h.stage}: {exc or 'cache accounting'}") from exc


def check_leases(loop: PipelineLoop) -> None:
    """Each live request's lease still pins a chain of its boundary's length on every in-process
    stage that holds it (a leased block was never evicted)."""
    for a in loop.run_state.admitted_now():
        for h in loop.handles:
            cache: StageCache | None = getattr(h, "cache", None)   # stage processes answer check() themselves
            lease = None if cache is None else cache.leases.get(a.id)
            if cache is None or lease is None:
                continue
            chain = cache.pool.chain(lease.boundary) if lease.boundary >= 0 else []
            hashes = [cache.pool.hash[b] for b in chain]
            pinned = lease.followed_from if lease.producer is not None else lease.reuse_blocks
            if hashes != a.request.block_hashes[:pinned]:
                raise InvariantViolation(f"stage {h.stage}: the leased prefix of {a.id} is no longer cached "
                                         f"({len(hashes)} of {pinned} blocks match)")


async def check_running(loop: PipelineLoop) -> None:
    """The invariants that hold at any wave boundary of a running pipeline."""
    await check_stages(loop.handles)
    check_leases(loop)


async def check_index(loop: PipelineLoop) -> None:
    """After a last flush, the hint index holds exactly what each stage caches."""
    await loop.publisher.flush()
    snapshots = await on_stages(loop.handles, lambda h: h.index_snapshot(), charged=False)
    for h, held in zip(loop.handles, snapshots, strict=True):
        count = await loop.store.hint_count(h.stage)
        if count != len(held):
            raise InvariantViolation(f"hint index: stage {h.stage} caches {len(held)} blocks, "
                                     f"the index says {count}")
        if held:                                   # each hash on its own: a snapshot is not one chain
            found = await loop.store.hint_lookup([[x] for x in held], [h.stage])
            missing = [x for x, r in zip(held, found, strict=True) if r.reuse_blocks != 1]
            if missing:
                raise InvariantViolation(f"hint index: block {missing[0]} cached on stage {h.stage} "
                                         "is missing from the index")


async def check_drained(loop: PipelineLoop, tasks: Iterable[asyncio.Task[object]] = ()) -> None:
    """Nothing the run took is still held once it drained (``tasks``: the run's own, all done)."""
    for h in loop.handles:
        st = await h.stats()
        if st.num_leases or st.num_escrowed_blocks:
            raise InvariantViolation(f"stage {h.stage}: {st.num_leases} leases and {st.num_escrowed_blocks} "
                                     "escrowed blocks after the run drained")
    await check_stages(loop.handles)             # with nothing in flight: every block free or cached
    run = loop.run_state
    if run.num_waiting or run.num_active or run.in_flight or run.computing:
        raise InvariantViolation(f"run state: {run.num_waiting} waiting, {run.num_active} admitted, "
                                 f"{run.in_flight} waves in flight, {len(run.computing)} blocks being "
                                 "computed after the run drained")
    mine = [e.request_id for e in await loop.store.registry_entries() if e.holder == loop.registry.holder]
    if mine:
        raise InvariantViolation(f"lease registry: {len(mine)} entries of this leader remain ({', '.join(mine[:3])})")
    await check_index(loop)
    left = sorted(t.get_name() for t in tasks if not t.done())
    if left:
        raise InvariantViolation(f"tasks left running: {', '.join(left)}")
