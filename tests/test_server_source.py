"""The server's open-loop source on the shared loop (sim engine on the wall clock): requests arrive when
submitted, the admission queue is bounded, and a cancelled request - waiting or admitted - releases
its lease and escrow on every stage."""

from __future__ import annotations

import asyncio
from array import array

import pytest

from wavepp.runtime.engines.config import SimConfig
from wavepp.runtime.engines.sim.engine import SimEngine
from wavepp.runtime.kvcache.hashing import block_hashes
from wavepp.runtime.loop import LoopConfig, PipelineLoop
from wavepp.runtime.request import Request
from wavepp.runtime.runs.runfile import RunInfo
from wavepp.runtime.sources.server import CANCELLED, QueueFull, ServerSource

BLOCK = 64


def request(i: int, tokens: int = 2048) -> Request:
    ids = array("I", [(i * 7919 + t) % 32000 for t in range(tokens)])
    return Request(f"r{i}", ids, asyncio.get_running_loop().time(), block_hashes(ids, BLOCK))


async def until(check: object, timeout_s: float = 10.0) -> None:
    end = asyncio.get_running_loop().time() + timeout_s
    while not check():  # type: ignore[operator]
        assert asyncio.get_running_loop().time() < end, "timed out"
        await asyncio.sleep(0.005)


def test_bounded_queue_and_cancellation_in_every_state_release_everything() -> None:
    async def main() -> None:
        engine = SimEngine(SimConfig("llama-3-8b", "h200", 2, BLOCK, [2000], clock="wall", time_scale=20.0))
        parts = engine.build()
        store = await engine.open_store()
        tel = engine.telemetry(RunInfo.new("wavepp", "serve", 0, "sim", "memory"))
        knobs = engine.default_knobs().replace(max_leases=2, max_wave_tokens=1024, min_wave_tokens=512)
        source = ServerSource(max_queue=3)
        loop = PipelineLoop(parts, store, knobs, source, tel, LoopConfig(1))
        run = asyncio.create_task(loop.run())
        await until(lambda: source.ready)

        futures = {i: source.submit(request(i)) for i in range(2)}
        await until(lambda: loop.run_state.num_active == 2)               # two leases: the others wait
        assert all(h.cache.leases for h in parts.handles)
        futures |= {i: source.submit(request(i)) for i in range(2, 5)}
        assert source.queued == 3 and not source.can_accept()
        with pytest.raises(QueueFull):
            source.submit(request(9))

        assert await source.cancel("r3")                          # waiting: dropped from the queue
        assert (await futures[3]).error == CANCELLED and source.queued == 2
        await until(lambda: (a := loop.run_state.get("r0")) is not None and a.scheduled > a.reused_tokens)
        assert await source.cancel("r0")                          # admitted, chunks in flight
        assert (await futures[0]).error == CANCELLED
        assert all("r0" not in h.cache.leases and "r0" not in h.cache.tickets for h in parts.handles)
        assert not await source.cancel("r0")                      # no longer in flight

        for i in (1, 2, 4):
            outcome = await asyncio.wait_for(futures[i], 30)
            assert outcome.completion is not None and outcome.completion.request_id == f"r{i}"
        assert source.outstanding == 0 and not loop.result.failures      # a server keeps no record of them
        # ... but counts them: the two cancelled ended without a completion (its state says which were cancelled)
        assert (await loop.status()).failed == loop.result.num_failed == 2
        loop.done.set()
        await run
        for h in parts.handles:
            assert h.cache.leases == {} and h.cache.tickets == {}, f"stage {h.stage} kept a lease or escrow"
            h.cache.check()

    asyncio.run(main())


def test_a_loop_that_stops_answers_every_request_in_flight() -> None:
    async def main() -> None:
        engine = SimEngine(SimConfig("llama-3-8b", "h200", 2, BLOCK, [2000], clock="wall", time_scale=50.0))
        parts = engine.build()
        store = await engine.open_store()
        tel = engine.telemetry(RunInfo.new("wavepp", "serve", 0, "sim", "memory"))
        source = ServerSource(max_queue=8)
        loop = PipelineLoop(parts, store, engine.default_knobs(), source, tel, LoopConfig(1))
        run = asyncio.create_task(loop.run())
        await until(lambda: source.ready)
        future = source.submit(request(0))
        loop.done.set()
        await run
        source.fail_all("the server stopped")
        assert (await future).error == "the server stopped" and not source.ready

    asyncio.run(main())


def test_a_request_cancelled_inside_its_admission_round_is_withdrawn_when_the_round_ends() -> None:
    async def main() -> None:
        engine = SimEngine(SimConfig("llama-3-8b", "h200", 2, BLOCK, [2000], clock="wall", time_scale=20.0))
        parts = engine.build()
        store = await engine.open_store()
        tel = engine.telemetry(RunInfo.new("wavepp", "serve", 0, "sim", "memory"))
        source = ServerSource(max_queue=8)
        loop = PipelineLoop(parts, store, engine.default_knobs(), source, tel, LoopConfig(1))
        gate = asyncio.Event()
        round_ = loop.in_force.admission.round

        async def held_round(batch: list[Request], *rest: object) -> object:     # waits until the test lets it go
            await gate.wait()
            return await round_(batch, *rest)  # type: ignore[arg-type]
        loop.in_force.admission.round = held_round  # type: ignore[method-assign]
        run = asyncio.create_task(loop.run())
        await until(lambda: source.ready)
        future = source.submit(request(0))
        await until(lambda: loop.run_state.admitting == 1)
        assert await source.cancel("r0") and not future.done()    # inside the round: not yet withdrawn
        gate.set()
        assert (await asyncio.wait_for(future, 10)).error == CANCELLED
        assert all(h.cache.leases == {} and h.cache.tickets == {} for h in parts.handles)
        loop.done.set()
        await run

    asyncio.run(main())
