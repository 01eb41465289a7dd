"""Stage tasks: each stage prepares (stage-local: materializes) and executes every wave, preparing
the next wave while it executes the current one, and an in-order link moves the wave's activations
to the next stage. A stage learns of a wave when it is planned (its schedule), so it can prepare
it before the activations arrive; it runs the wave once both are there.

A chunk whose request failed or fell back meanwhile is skipped ("stale": its attempt is no longer
live). Before a stage prepares a chunk, the stage admission of the policy the chunk's request was
admitted under runs (a stage that was not part of admission leases and escrows on the first chunk;
a prefix it lacks is a late fallback) - a policy switched meanwhile applies to later admissions.

A :class:`StageWorker` sees one stage's handle, the run state (:mod:`runtime.run_state`), where
requests end (:mod:`runtime.completion`) and the policy in force - nothing else of the loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

from wavepp.runtime.clock import now
from wavepp.runtime.completion import RequestEnds
from wavepp.runtime.engines.base import StageExecutor
from wavepp.runtime.kvcache.handle import MaterializeItem, StageHandle
from wavepp.runtime.kvcache.stage_cache import Mismatch
from wavepp.runtime.mechanisms.stage_admission import Fail, FallBack, Halt, Readmit
from wavepp.runtime.planning.step_times import StepTimes
from wavepp.runtime.policies import get_policy
from wavepp.runtime.request import Chunk, Wave
from wavepp.runtime.run_state import RunState
from wavepp.telemetry import names as N
from wavepp.telemetry.setup import Telemetry

if TYPE_CHECKING:
    from wavepp.runtime.policies.base import Policy


class StageWorker:
    """Stage ``stage``'s side of the loop: its queues and its two tasks (prepare, execute).

    Queues: ``inbox`` - waves planned (the schedule reaches every stage when the wave is planned,
    as a plan in the store or a relayed schedule); ``arrived`` - waves whose activations came from
    the previous stage; ``prepared`` - the wave prepared (materialized) while the previous one
    executes, with its block tables, one at most; ``out`` - waves this stage finished, for the
    link to the next stage (unused on the last stage, which retires them)."""

    def __init__(self, stage: int, handle: StageHandle, executor: StageExecutor, tel: Telemetry,
                 run: RunState, ends: RequestEnds, policy: Callable[[], Policy], block_size: int,
                 step_times: StepTimes) -> None:
        """``step_times``: what this stage's steps took goes there (a timed chunking plans with it)."""
        self.stage = stage
        self.handle = handle
        self.executor = executor
        self.tel = tel
        self.run = run
        self.ends = ends
        self.policy = policy
        self.block_size = block_size
        self.step_times = step_times
        self.last = stage == run.num_stages - 1
        self.inbox: asyncio.Queue[Wave] = asyncio.Queue()
        self.arrived: asyncio.Queue[Wave] = asyncio.Queue()
        self.prepared: asyncio.Queue[tuple[Wave, dict[str, list[int]]]] = asyncio.Queue()
        self.out: asyncio.Queue[Wave] = asyncio.Queue()

    def span(self, name: str, attributes: dict[str, Any]) -> AbstractContextManager[Any]:
        """A span of this stage's work (a mechanism's: e.g. a wait for KV capacity)."""
        return self.tel.span(name, attributes)

    async def prepare_waves(self) -> None:
        """Stage-local preparation of the next wave while the stage executes the current one: its
        relayed requests, stage-local admission (baselines) and the blocks of its chunks, so none of
        it (a message per operation in process mode) sits between two waves of the stage. One wave
        ahead at most: the cache commits to a wave only just before running it.

        The blocks it takes are never ones the running wave reads: those are held by that wave's
        requests until they retire. A request that fails meanwhile is released, and the running wave
        may still write its rows into blocks the next wave now owns; the next wave runs after it and
        writes every position it covers before reading it (a chunk's own K/V first, then attention),
        and positions past a chunk's end are written by the request's next chunk before any read."""
        while True:
            await self.prepared.join()          # the stage has taken the previous prepared wave
            wave = await self.inbox.get()
            with self.tel.span(N.MATERIALIZE, {N.STAGE: self.stage, N.WAVE_ID: wave.id}, parent=wave.span,
                               cpu=True) as span:
                tables, evictions = await self._prepare(wave)
                span.set_attribute(N.EVICTIONS, evictions)
            self.prepared.put_nowait((wave, tables))

    async def _prepare(self, wave: Wave) -> tuple[dict[str, list[int]], int]:
        run, policy = self.run, self.policy()
        if wave.broadcast_tokens:
            await self.handle.receive_requests(wave.broadcast_tokens)
        await policy.host.per_wave(self, wave)
        ready: list[Chunk] = []
        for chunk in wave.chunks:
            a = run.live(chunk)
            if a is None:
                continue
            rules = get_policy(a.policy)        # the policy it was admitted under, not the one now
            match await rules.stage_admission.before_chunk(self, wave.id, a, chunk, rules.reserve):
                case FallBack(granted):
                    await self.ends.late_fallback(a, granted, self.stage)
                case Readmit(reason):
                    await self.ends.readmit(a, self.stage, reason)
                case Fail(reason):
                    await self.ends.fail(a, reason)
                case Halt(reason):
                    self.tel.event(self.ends.spans[a.id], N.EVENT_HALT, {N.STAGE: self.stage, N.ERROR: reason})
                    await self.ends.fail(a, reason)
                case _:
                    ready.append(chunk)
        ready = [c for c in ready if run.live(c) is not None]
        made = await self.handle.materialize_many(
            [MaterializeItem(c.request_id, c.start, c.length, c.reuse_blocks) for c in ready])
        tables: dict[str, list[int]] = {}
        for chunk, table in zip(ready, made.tables, strict=True):
            a = run.live(chunk)
            if a is None:
                continue                        # failed on another stage meanwhile (released there)
            if isinstance(table, Mismatch):
                await self.ends.fail(a, table.reason)
            else:
                tables[chunk.request_id] = table
        return tables, made.evictions

    async def execute_waves(self) -> None:
        """Run the prepared waves in order, then hand each to the link (or retire it)."""
        run = self.run
        while True:
            wave, tables = await self.prepared.get()
            if self.stage > 0:
                arrived = await self.arrived.get()         # links deliver in order
                assert arrived.id == wave.id, (arrived.id, wave.id)
            self.prepared.task_done()       # prepare the next wave while this one runs
            live = [c for c in wave.chunks if run.live(c) is not None and c.request_id in tables]
            tokens = sum(c.length for c in live)
            with self.tel.span(N.EXECUTE, {N.STAGE: self.stage, N.WAVE_ID: wave.id, N.TOKENS: tokens,
                                           N.REQUEST_IDS: [c.request_id for c in live],
                                           N.CHUNK_STARTS: [c.start for c in live],
                                           N.CHUNK_TOKENS: [c.length for c in live]}, parent=wave.span):
                if live:
                    run.executing += 1
                    started = now()
                    try:
                        await self.executor.execute(self.stage, wave.id, live, tables)
                    finally:
                        run.executing -= 1
                    self.step_times.observe(self.stage, [(c.start, c.length) for c in live], now() - started)
            run.stage_passed(self.stage)
            if self.last:
                await self.ends.retire(wave, live)
            else:
                await self.out.put(wave)


async def run_link(src: StageWorker, dst: StageWorker) -> None:
    """Stage ``src`` -> the next stage ``dst``: sends in order, so chunks of one request never overtake."""
    while True:
        wave = await src.out.get()
        with src.tel.span(N.SEND, {N.STAGE: src.stage, N.WAVE_ID: wave.id, N.TOKENS: wave.num_tokens},
                          parent=wave.span):
            await src.executor.transfer(src.stage, wave)
        dst.arrived.put_nowait(wave)
