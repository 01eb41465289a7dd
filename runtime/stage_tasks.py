"""Stage tasks: each stage prepares (stage-local: materializes) and executes every wave, preparing
the next wave while it executes the current one, and an in-order link moves the wave's activations
to the next stage. A stage learns of a wave when it is planned (its schedule), so it can prepare
it before the activations arrive; it runs the wave once both are there.

A chunk whose request failed or fell back meanwhile is skipped ("stale": its attempt is no longer
live). Before a stage prepares a chunk, the policy's stage admission runs (a stage that was not
part of admission leases and escrows on the first chunk; a prefix it lacks is a late fallback).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from runtime.completion import fail, late_fallback, retire
from runtime.engines.base import MaterializeItem
from runtime.kvcache.stage_cache import DescriptorMismatch
from runtime.mechanisms.stage_admission import LateFallback
from runtime.request import AdmittedRequest, Chunk
from telemetry import names as N

if TYPE_CHECKING:
    from runtime.loop import PipelineLoop


def is_live(loop: PipelineLoop, chunk: Chunk) -> AdmittedRequest | None:
    a = loop.active.get(chunk.request_id)
    return a if a is not None and a.attempt == chunk.attempt else None

async def prepare_waves(loop: PipelineLoop, s: int) -> None:
    """Stage-local preparation of the next wave while the stage executes the current one: its
    relayed requests, stage-local admission (baselines) and the blocks of its chunks, so none of
    it (a message per operation in process mode) sits between two waves of the stage. One wave
    ahead at most: the cache commits to a wave only just before running it.

    The blocks it takes are never ones the running wave reads: those are held by that wave's
    requests until they retire. A request that fails meanwhile is released, and the running wave
    may still write its rows into blocks the next wave now owns; the next wave runs after it and
    writes every position it covers before reading it (a chunk's own K/V first, then attention),
    and positions past a chunk's end are written by the request's next chunk before any read."""
    handle, ready = loop.handles[s], loop.prepared[s]
    while True:
        await ready.join()              # the stage has taken the previous prepared wave
        wave = await loop.inbox[s].get()
        assert wave is not None
        tables: dict[str, list[int]] = {}
        with loop.tel.span(N.MATERIALIZE, {N.STAGE: s, N.WAVE_ID: wave.id}) as span:
            if wave.broadcast_tokens:
                await handle.receive_requests(wave.broadcast_tokens)
            await loop.policy.host.per_wave(loop, s, wave)
            ready_chunks = []
            for chunk in wave.chunks:
                live_req = is_live(loop, chunk)
                if live_req is None:
                    continue
                try:
                    await loop.policy.stage_admission.before_chunk(loop, s, wave.id, live_req, chunk)
                except DescriptorMismatch as exc:
                    await fail(loop, chunk.request_id, str(exc))
                    continue
                except LateFallback as fb:
                    await late_fallback(loop, chunk.request_id, fb.granted, s)
                    continue
                ready_chunks.append(chunk)
            ready_chunks = [c for c in ready_chunks if is_live(loop, c) is not None]
            made = await handle.materialize_many(
                [MaterializeItem(c.request_id, c.start, c.length, c.reuse_blocks) for c in ready_chunks])
            span.set_attribute(N.EVICTIONS, made.evictions)
            for chunk, table in zip(ready_chunks, made.tables, strict=True):
                if is_live(loop, chunk) is None:
                    continue                    # failed on another stage meanwhile (released there)
                if isinstance(table, DescriptorMismatch):
                    await fail(loop, chunk.request_id, str(table))
                else:
                    tables[chunk.request_id] = table
        ready.put_nowait((wave, tables))

async def execute_waves(loop: PipelineLoop, s: int) -> None:
    """Stage ``s`` runs its prepared waves in order, then hands each to the link (or retires it)."""
    last = s == loop.num_stages - 1
    while True:
        wave, tables = await loop.prepared[s].get()
        if s > 0:
            arrived = await loop.arrived[s].get()         # links deliver in order
            assert arrived.id == wave.id, (arrived.id, wave.id)
        loop.prepared[s].task_done()        # prepare the next wave while this one runs
        live = [c for c in wave.chunks if is_live(loop, c) is not None and c.request_id in tables]
        tokens = sum(c.length for c in live)
        with loop.tel.span(N.EXECUTE, {N.STAGE: s, N.WAVE_ID: wave.id, N.TOKENS: tokens,
                                       N.REQUEST_IDS: [c.request_id for c in live]}):
            if live:
                loop.executing += 1
                try:
                    await loop.executor.execute(s, wave.id, live, tables)
                finally:
                    loop.executing -= 1
        loop.passed[s] += 1
        loop.index_dirty.notify()
        if last:
            await retire(loop, wave, live)
        else:
            await loop.links[s].put(wave)

async def run_link(loop: PipelineLoop, s: int) -> None:
    """Stage ``s`` -> ``s + 1``: sends in order, so chunks of one request never overtake."""
    while True:
        wave = await loop.links[s].get()
        assert wave is not None
        with loop.tel.span(N.SEND, {N.STAGE: s, N.WAVE_ID: wave.id, N.TOKENS: wave.num_tokens}):
            await loop.executor.transfer(s, wave)
        loop.arrived[s + 1].put_nowait(wave)
