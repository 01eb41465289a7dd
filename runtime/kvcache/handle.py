"""A stage's cache as the leader and the loop see it: :class:`StageHandle`, each method one message to the
stage or work the stage does on its own critical path, and the items those messages carry.

Admission, the mechanisms and the loop reach a stage's cache only through a handle; an engine builds the
handles (in process, or in front of a stage process) and may attach a :class:`CostHook`: the sim uses it to
charge modelled coordination time (a store round trip, per-block index work); real engines pay real time and
attach none.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

from wavepp.runtime.kvcache.followed import DescriptorMismatch
from wavepp.runtime.kvcache.stage_cache import CacheStats, Mismatch, StageCache
from wavepp.runtime.request import cdiv
from wavepp.store.probe import longest_prefix_in

T = TypeVar("T")


class CostHook(Protocol):
    """Charges the time a coordination operation takes (the sim's model of it)."""

    async def stage_op(self, op: str, amount: int, remote: bool) -> None:
        """``amount`` is blocks for cache operations, tokens for ``broadcast``."""
        ...


@dataclass(frozen=True, slots=True)
class MaterializeItem:
    request_id: str
    start: int
    length: int
    reuse_blocks: int


@dataclass(frozen=True, slots=True)
class Materialized:
    """What a stage answers for a wave's chunks: per chunk its block table (or the
    :class:`Mismatch` that refused it), and how many cached blocks the stage evicted to make room."""

    tables: list[list[int] | Mismatch]
    evictions: int


@dataclass(frozen=True, slots=True)
class Escrowed:
    """What a stage answers for a round's escrows: how many of the ``asked`` requests, in order, it
    set room aside for (the first that did not fit and every one after it: none)."""

    fit: int
    asked: int

    @property
    def all(self) -> bool:
        return self.fit == self.asked


@dataclass(frozen=True, slots=True)
class LeaseItem:
    request_id: str
    hashes: list[int]
    reuse_blocks: int
    num_tokens: int
    follow: tuple[str, int] | None = None    # (producer, to): reach on through its blocks (StageCache.lease)


async def on_stages(handles: Sequence[StageHandle], op: Callable[[StageHandle], Awaitable[T]],
                    charged: bool = True) -> list[T]:
    """Run one operation on several stages, one message each.

    Concurrently when the handles' operations take time (messages to other processes, or the
    sim's modelled costs); one after the other when they are plain in-process calls that never
    wait - there, tasks would only add event-loop scheduling to the admission path.
    ``charged=False``: an operation the sim charges nothing for (draining a stage's index events, a
    snapshot of what it holds), which waits only on a stage in another process.
    """
    if any(h.suspends if charged else h.remote for h in handles):
        return list(await asyncio.gather(*(op(h) for h in handles)))
    return [await op(h) for h in handles]


class StageHandle:
    """The leader's and the loop's view of one stage's cache.

    Each method is one message to the stage (``remote``) or work the stage does on its own
    critical path (``remote=False``); the optional cost hook turns either into time.
    """

    def __init__(self, cache: StageCache, costs: CostHook | None = None) -> None:
        self.cache = cache
        self.stage = cache.stage
        self._costs = costs

    @property
    def capacity(self) -> int:
        """Blocks in this stage's KV pool (fixed for the handle's lifetime)."""
        return self.cache.pool.num_blocks

    @property
    def resume_step(self) -> int:
        """Blocks between the boundaries a request may resume at here: the state-snapshot interval of a
        hybrid model's stage, else 1 (any block boundary)."""
        states = self.cache.states
        return states.spec.interval_blocks if states is not None else 1

    @property
    def mirrored(self) -> bool:
        """Whether a central manager decides this stage's blocks (it keeps none of its own)."""
        return self.cache.mirrored

    def set_snapshot_interval(self, tokens: int) -> None:
        """The ``snapshot_interval`` knob: a hybrid stage keeps snapshots every ``tokens`` (whole blocks)
        from now on; nothing on a stage without state layers."""
        states = self.cache.states
        if states is not None:
            states.spec = dataclasses.replace(states.spec, interval_blocks=max(1, tokens // self.cache.block_size))

    @property
    def remote(self) -> bool:
        """Whether the cache lives in another process (each operation a message there)."""
        return False

    @property
    def suspends(self) -> bool:
        """Whether an operation may wait (a message, a modelled cost) rather than return at once."""
        return self._costs is not None

    async def _charge(self, op: str, blocks: int, remote: bool = True) -> None:
        if self._costs is not None:
            await self._costs.stage_op(op, blocks, remote)

    async def lookup_local(self, prompts: Sequence[list[int]], limits: Sequence[int],
                           remote: bool = True) -> list[int]:
        """Longest locally cached prefix per prompt (a walk of this stage's tree)."""
        work = self.cache.work
        out = [self.cache.prefix_length(h, lim) for h, lim in zip(prompts, limits, strict=True)]
        await self._charge("lookup", self.cache.work - work, remote)
        return out

    async def lease(self, items: Sequence[LeaseItem], remote: bool = True) -> list[int]:
        work = self.cache.work
        granted = [self.cache.lease(i.request_id, i.hashes, i.reuse_blocks, i.num_tokens, i.follow) for i in items]
        await self._charge("lease", self.cache.work - work, remote)
        return granted

    async def shrink(self, items: Sequence[tuple[str, int]], remote: bool = True) -> list[int]:
        """Lower leases to the leader's boundaries; answers the boundary each now holds (on a hybrid
        stage possibly lower still: the largest where it keeps a state snapshot)."""
        work, walked = self.cache.work, sum(self.cache.leases[rid].reuse_blocks - k for rid, k in items)
        granted = [self.cache.shrink_lease(rid, k) for rid, k in items]
        await self._charge("shrink", walked + self.cache.work - work, remote)
        return granted

    async def escrow(self, items: Sequence[tuple[str, int]], remote: bool = True,
                     held_prefix: bool = False) -> Escrowed:
        """Escrow a round in order; stops at the first request that does not fit (see
        :meth:`StageCache.escrow_round`: requests past that point lose their leases here).
        ``held_prefix``: the reserve also counts the prefix blocks others held (``Reserve.held_prefix``)."""
        await self._charge("escrow", sum(n for _, n in items), remote)
        return Escrowed(self.cache.escrow_round(list(items), held_prefix), len(items))

    async def release(self, request_ids: Sequence[str], remote: bool = True) -> int:
        """Drop what the requests hold here (idempotent); returns how many held anything."""
        await self._charge("release", 0, remote)
        return sum(self.cache.release(rid) for rid in request_ids)

    async def materialize(self, rid: str, start: int, length: int, reuse_blocks: int) -> list[int]:
        first = rid not in self.cache.tables
        table = self.cache.materialize(rid, start, length, reuse_blocks)
        # New blocks, plus the prefix's block table on the request's first chunk here.
        blocks = cdiv(length, self.cache.block_size) + (reuse_blocks if first else 0)
        await self._charge("materialize", blocks, remote=False)
        return table

    async def materialize_many(self, items: Sequence[MaterializeItem]) -> Materialized:
        """Materialize a wave's chunks in order (one message); a chunk whose descriptor does not
        match this stage's cache gets a :class:`Mismatch` saying why instead of a block table."""
        out: list[list[int] | Mismatch] = []
        evicted = self.cache.pool.num_evictions
        for i in items:
            try:
                out.append(await self.materialize(i.request_id, i.start, i.length, i.reuse_blocks))
            except DescriptorMismatch as exc:
                out.append(Mismatch(str(exc)))
        return Materialized(out, self.cache.pool.num_evictions - evicted)

    async def complete_many(self, items: Sequence[tuple[str, list[int]]]) -> list[list[int]]:
        """Complete a wave's finished requests in order (one message): (request id, block hashes)
        each; returns each request's block table on this stage."""
        tables = []
        for rid, hashes in items:
            table = list(self.cache.tables.get(rid, ()))
            await self._charge("complete", len(table), remote=False)
            self.cache.complete(rid, hashes)
            tables.append(table)
        return tables

    async def store_many(self, items: Sequence[tuple[str, list[int], int]]) -> None:
        """Store running requests' executed full blocks (:meth:`StageCache.store`; request id, block hashes,
        blocks below which to store), one message; each newly attached block costs as at completion."""
        attached = sum(self.cache.store(rid, hashes, upto) for rid, hashes, upto in items)
        await self._charge("complete", attached, remote=False)

    # ---- off the critical path: index publishing, status, checks ------------------------------
    async def drain_index_updates(self) -> tuple[list[int], list[int]]:
        return self.cache.drain_index_updates()

    async def requeue_index_updates(self, attached: list[int], detached: list[int]) -> None:
        self.cache.requeue_index_updates(attached, detached)

    async def index_snapshot(self) -> list[int]:
        """Every block hash this stage holds now (pending events are dropped: the snapshot has them)."""
        self.cache.drain_index_updates()
        return list(self.cache.pool.by_hash)

    async def stats(self) -> CacheStats:
        return self.cache.stats()

    async def check(self) -> None:
        """Assert the cache's accounting invariants (after a run)."""
        self.cache.check()

    async def receive_requests(self, num_tokens: int) -> None:
        """Baselines only: new requests (with their token ids) relayed to this stage before it runs."""
        await self._charge("broadcast", num_tokens, remote=True)

    async def return_sample_state(self) -> None:
        """The last stage's sample state relayed back to the first (a conventional PP loop's
        return path): one stage message."""
        await self._charge("sample", 0, remote=True)

    async def host_iteration(self, pending: Sequence[list[int]], copied_tokens: int, num_active: int) -> int:
        """A conventional PP loop's per-iteration host work on this stage (``runtime.mechanisms.host_work``):
        the schedule arrives from the previous stage (one message), the scheduler re-runs over
        ``num_active`` requests, each pending prompt's prefix is walked in this stage's tree, and the
        scheduled prompts (``copied_tokens``) are copied into the step's inputs. Returns blocks walked."""
        cached, walked = self.cache.pool.by_hash, 0
        for hashes in pending:                     # a radix walk visits every hit and the first miss; residency
            hits, _ = longest_prefix_in(hashes, cached)   # is prefix-closed, so a binary search counts them
            walked += hits + (hits < len(hashes))
        bytes(4 * copied_tokens)                   # the prompt copy (int32 tokens)
        await self._charge("walk", walked, remote=True)
        await self._charge("schedule", num_active, remote=False)
        await self._charge("copy", copied_tokens, remote=False)
        return walked
