"""Coordination costs: what admission, materialization and completion cost besides compute.

The sim charges these in virtual time; real engines pay them for real. Each number is either
measured on this project's own code by :func:`measure` (``wavepp calibrate-coordination``
re-measures and prints them) or cited to its source. The defaults below were measured with
``wavepp calibrate-coordination`` on the project's 2-core development machine (2026-11-29,
CPython 3.11.7); a serving host's CPU is usually faster, so they do not favour WavePP.
"""

from __future__ import annotations

import asyncio
import pickle
import random
import time
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass, fields
from typing import Any, TypeVar

from wavepp.runtime.clock import sleep
from wavepp.runtime.kvcache.hashing import block_hashes
from wavepp.runtime.kvcache.stage_cache import StageCache
from wavepp.store.base import HintResult, Store
from wavepp.store.memory import MemoryStore
from wavepp.store.wrapper import StoreWrapper

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class CoordinationCosts:
    store_rtt_s: float               # one call on the memory store
    redis_rtt_s: float               # one call on Redis at loopback (redis-py asyncio, incl. client overhead)
    per_probe_s: float               # one hint-index membership probe
    per_index_update_s: float        # one attach/detach counter update in the index
    stage_message_s: float           # one control message leader -> stage process
    per_block_lookup_s: float        # one probe of a stage's reuse tree
    per_block_lease_s: float         # one unit of lease work: a probe, or a block newly held
    per_block_escrow_s: float        # promise one block (an escrow is a count)
    per_block_materialize_s: float   # take a free block or evict the LRU leaf, write the block table
    per_block_complete_s: float      # attach one block to the reuse tree and unpin it
    per_block_hash_s: float          # hash one block of 64 tokens at arrival
    request_broadcast_per_token_s: float  # baseline: pickle + unpickle of a new request's token ids
    # Lockstep host work of a conventional PP loop (runtime.mechanisms.host_work), per unit:
    per_request_schedule_s: float = 0.25e-6   # re-running the scheduler: StaticPlanner.plan per active request
    per_token_copy_s: float = 9.5e-9          # copying a prompt's token ids into the step's inputs
    host_work_scale: float = 1.0              # multiplies the three lockstep costs (sensitivity studies)

    def as_dict(self) -> dict[str, float]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


# Measured by `wavepp calibrate-coordination --redis redis://127.0.0.1:6379/0` (see module docstring);
# redis_rtt_s is one single-prompt hint lookup against a local Redis 7.0; stage_message_s is the
# hardware profile's p2p latency (aiconfigurator h200_sxm.yaml / b300_sxm.yaml node.p2p_latency,
# 10 us); per_request_schedule_s and per_token_copy_s were measured by the same command
# (2026-11-30: 0.20-0.30 us per active request over 32-512, 9.5 ns per token); and
# request_broadcast_per_token_s is cited: TensorRT-LLM PR #15134 measured pickle +
# unpickle of one ~40k-token request at 0.06 ms after its optimisation (1.5 ns a token) - we use
# the optimised figure so the baseline is not made slower than its source. per_block_escrow_s was
# re-measured on 2026-12-01 when an escrow became a count (0.001 us a block, an O(1) promise;
# 0.005 us before on the same machine); materialization, which now takes the blocks, measured
# 0.20-0.23 us against 0.24 us before, side by side, so its figure stays.
DEFAULT_COSTS = CoordinationCosts(
    store_rtt_s=1.5e-6,
    redis_rtt_s=165e-6,
    per_probe_s=0.13e-6,
    per_index_update_s=0.09e-6,
    stage_message_s=10e-6,
    per_block_lookup_s=0.17e-6,
    per_block_lease_s=0.28e-6,
    per_block_escrow_s=0.001e-6,
    per_block_materialize_s=0.14e-6,
    per_block_complete_s=0.67e-6,
    per_block_hash_s=2.0e-6,
    request_broadcast_per_token_s=0.06e-3 / 40_000,
)


class SimCostHook:
    """Charges coordination time on the running (virtual) clock."""

    def __init__(self, costs: CoordinationCosts) -> None:
        c = costs
        self.costs = costs
        self._per_block = {
            "lookup": c.per_block_lookup_s, "lease": c.per_block_lease_s, "shrink": c.per_block_lookup_s,
            "escrow": c.per_block_escrow_s, "release": 0.0,
            "materialize": c.per_block_materialize_s, "complete": c.per_block_complete_s,
            "broadcast": c.request_broadcast_per_token_s,   # amount in tokens, not blocks
            # lockstep host work: blocks walked, active requests re-scheduled, prompt tokens copied
            "sample": 0.0,                                   # the return hop is one message, nothing per item
            "walk": c.per_block_lookup_s * c.host_work_scale,
            "schedule": c.per_request_schedule_s * c.host_work_scale,
            "copy": c.per_token_copy_s * c.host_work_scale,
        }

    async def stage_op(self, op: str, amount: int, remote: bool) -> None:
        dt = amount * self._per_block[op] + (self.costs.stage_message_s if remote else 0.0)
        if dt > 0:
            await sleep(dt)


class CostedStore(StoreWrapper):
    """Wraps a store so each call costs one round trip, plus per-item work on the hint index (sim only).

    The inner call runs first and the time is charged after it, so a run that ends while a reply
    is "in flight" loses no update. Every call costs one round trip (the hook); the three hint-index
    methods below add their per-item work, which depends on their arguments or result, to that
    same charge (one sleep, so the virtual clock sees one timer per call).
    """

    def __init__(self, inner: Store, costs: CoordinationCosts, rtt_s: float | None = None) -> None:
        super().__init__(inner)
        self.costs = costs
        self.rtt_s = costs.store_rtt_s if rtt_s is None else rtt_s

    async def _charge(self, items_s: float) -> None:
        await sleep(self.rtt_s + items_s)

    async def _call(self, name: str, call: Callable[[], Coroutine[Any, Any, T]]) -> T:
        result = await call()
        await self._charge(0.0)
        return result

    async def hint_lookup(self, prompts: Sequence[Sequence[int]], stages: Sequence[int]) -> list[HintResult]:
        result = await self.inner.hint_lookup(prompts, stages)
        await self._charge(sum(r.probes for r in result) * self.costs.per_probe_s)
        return result

    async def hint_update(self, stage: int, attached: Sequence[int], detached: Sequence[int]) -> None:
        await self.inner.hint_update(stage, attached, detached)
        await self._charge((len(attached) + len(detached)) * self.costs.per_index_update_s)

    async def hint_update_many(self, updates: Sequence[tuple[int, Sequence[int], Sequence[int]]]) -> None:
        await self.inner.hint_update_many(updates)
        await self._charge(sum(len(a) + len(d) for _, a, d in updates) * self.costs.per_index_update_s)


def _per_item(fn, items: int, repeat: int = 5) -> float:  # type: ignore[no-untyped-def]
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best / max(items, 1)


async def _measure_store(hashes: list[int], calls: int = 2000) -> tuple[float, float, float]:
    """Per-call and per-item cost of the memory store, awaited inside one running loop."""
    store = MemoryStore()
    await store.hint_update(0, hashes, [])

    async def timed(n: int, coro_fn) -> float:  # type: ignore[no-untyped-def]
        best = float("inf")
        for _ in range(3):
            t0 = time.perf_counter()
            for _ in range(n):
                await coro_fn()
            best = min(best, (time.perf_counter() - t0) / n)
        return best

    rtt = await timed(calls, lambda: store.hint_lookup([[]], [0]))
    lookup = await timed(calls // 10, lambda: store.hint_lookup([hashes], [0]))
    probes = (await store.hint_lookup([hashes], [0]))[0].probes
    update = await timed(5, lambda: store.hint_update(1, hashes, hashes))
    return rtt, max(lookup - rtt, 0.0) / max(probes, 1), max(update - rtt, 0.0) / (2 * len(hashes))


async def _measure_redis(url: str, calls: int = 1000) -> float:
    from wavepp.store.redis_store import RedisStore
    store = await RedisStore.connect(url)
    try:
        best = float("inf")
        for _ in range(3):
            t0 = time.perf_counter()
            for _ in range(calls):
                await store.hint_lookup([[1]], [0])
            best = min(best, (time.perf_counter() - t0) / calls)
        return best
    finally:
        await store.close()


def measure(num_blocks: int = 2048, block_size: int = 64, redis_url: str | None = None) -> CoordinationCosts:
    """Measure the per-operation costs on this project's own code (best of 5 runs each).

    ``redis_url``: also measure one round trip to that Redis (else keep the recorded figure)."""
    redis_rtt = asyncio.run(_measure_redis(redis_url)) if redis_url else None
    rng = random.Random(0)
    tokens = [rng.randrange(32000) for _ in range(num_blocks * block_size)]
    per_hash = _per_item(lambda: block_hashes(tokens, block_size), num_blocks)
    hashes = block_hashes(tokens, block_size)

    def fresh_stage() -> StageCache:
        c = StageCache(0, 4 * num_blocks, block_size)
        c.lease("warm", hashes, 0, len(tokens))
        c.escrow("warm", num_blocks)
        c.materialize("warm", 0, len(tokens), 0)
        c.complete("warm", hashes)
        return c

    stage = fresh_stage()

    def lookup() -> None:
        for _ in range(100):
            stage.prefix_length(hashes)
    work = stage.work
    lookup()
    per_lookup = _per_item(lookup, stage.work - work)

    def lease_release() -> None:
        stage.lease("r", hashes, num_blocks, len(tokens))
        stage.release("r")
    work = stage.work
    lease_release()                          # a cold chain: every block newly held, then let go
    per_lease = _per_item(lease_release, stage.work - work)

    def escrow_drop() -> None:
        stage.lease("e", hashes, 0, len(tokens))
        stage.escrow("e", num_blocks)
        stage.release("e")
    per_escrow = _per_item(escrow_drop, 2 * num_blocks)

    def materialize_complete() -> None:
        s = StageCache(0, num_blocks, block_size)
        s.lease("w", hashes, 0, len(tokens))       # a pool in use: every block was handed out before
        s.escrow("w", num_blocks)
        s.materialize("w", 0, len(tokens), 0)
        s.release("w")
        s.lease("m", hashes, 0, len(tokens))
        s.escrow("m", num_blocks)
        t0 = time.perf_counter()
        s.materialize("m", 0, len(tokens), 0)
        t1 = time.perf_counter()
        s.complete("m", hashes)
        t2 = time.perf_counter()
        timings.append((t1 - t0, t2 - t1))
    timings: list[tuple[float, float]] = []
    for _ in range(5):
        materialize_complete()
    per_mat = min(t[0] for t in timings) / num_blocks
    per_complete = min(t[1] for t in timings) / num_blocks

    rtt, per_probe, per_update = asyncio.run(_measure_store(hashes))
    pickled = _per_item(lambda: pickle.loads(pickle.dumps(tokens)), len(tokens))
    per_schedule, per_copy = _measure_host(tokens, block_size)
    return CoordinationCosts(
        store_rtt_s=rtt, redis_rtt_s=DEFAULT_COSTS.redis_rtt_s if redis_rtt is None else redis_rtt,
        per_probe_s=per_probe, per_index_update_s=per_update,
        stage_message_s=DEFAULT_COSTS.stage_message_s, per_block_lookup_s=per_lookup,
        per_block_lease_s=per_lease, per_block_escrow_s=per_escrow, per_block_materialize_s=per_mat,
        per_block_complete_s=per_complete, per_block_hash_s=per_hash,
        request_broadcast_per_token_s=min(pickled, DEFAULT_COSTS.request_broadcast_per_token_s),
        per_request_schedule_s=per_schedule, per_token_copy_s=per_copy,
    )


def _measure_host(tokens: list[int], block_size: int, num_active: int = 128) -> tuple[float, float]:
    """The lockstep host work's per-unit costs: a scheduler pass (our static planner over
    ``num_active`` admitted requests, per request) and a prompt copy (per token)."""
    from array import array

    from wavepp.runtime.planning.planner import StaticPlanner
    from wavepp.runtime.request import AdmittedRequest, Request

    prompt = array("i", tokens)
    active = [AdmittedRequest(Request(f"r{i}", prompt, 0.0, []), 0, 0.0, block_size) for i in range(num_active)]
    planner = StaticPlanner(8192, block_size)
    per_schedule = _per_item(lambda: planner.plan(active), num_active)

    def copy() -> None:
        out: list[int] = []
        out.extend(prompt.tolist())
    return per_schedule, _per_item(copy, len(prompt))
