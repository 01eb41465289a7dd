"""Completion, failure and fallback: the end of a request's path.

Completion attaches the request's blocks on every stage (publishing them to the hint index),
drops its lease and registry entry, returns the first token and brings the next arrival. A
failure releases everything the request holds; a late fallback (baselines) lowers its reuse
boundary and sends it back to admission.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from runtime.engines.base import now
from runtime.request import AdmittedRequest, Chunk, Completion, Request, RequestState, Wave
from telemetry import names as N

if TYPE_CHECKING:
    from runtime.loop import PipelineLoop


async def retire(loop: PipelineLoop, wave: Wave, live: list[Chunk]) -> None:
    done = []
    for c in live:
        a = loop.active[c.request_id]
        a.completed += c.length
        if c.is_last:
            done.append(a)
    if loop.policy.return_path.ring:
        await loop.handles[-1].return_sample_state()
    if done:
        await complete(loop, done)
    loop.retired += 1
    del loop.waves_in_flight[wave.id]
    if loop.publish_plans:
        loop.writer.submit(lambda: loop.store.plan_retire(wave.id))
    loop.changed.notify()

async def complete(loop: PipelineLoop, done: list[AdmittedRequest]) -> None:
    """The requests whose last chunk left the last stage in one wave: one message per stage."""
    items = [(a.request.id, a.request.block_hashes) for a in done]
    per_stage = await asyncio.gather(*(h.complete_many(items) for h in loop.handles))
    for i, a in enumerate(done):
        finish(loop, a, tuple(tuple(tables[i]) for tables in per_stage))
    loop.capacity.notify()
    loop.index_dirty.notify()

def finish(loop: PipelineLoop, a: AdmittedRequest, tables: tuple[tuple[int, ...], ...]) -> None:
    req = a.request
    del loop.active[req.id]
    loop.registry.released(req.id)
    req.state = RequestState.DONE
    loop.remember_computed(req.block_hashes)
    span = loop.spans.pop(req.id)
    span.set_attributes({N.REUSED_TOKENS: a.reused_tokens, N.REUSE_BLOCKS: a.reuse_blocks,
                         N.FALLBACKS: req.fallbacks})
    loop.tel.end(span)
    loop.result.completions.append(Completion(
        req.id, loop.executor.first_token(req.id), tables, a.reused_tokens, now() - req.arrival))
    loop.executor.forget(req.id)
    loop.next_arrival()

async def release_everywhere(loop: PipelineLoop, rid: str) -> None:
    await asyncio.gather(*(h.release([rid]) for h in loop.handles))
    loop.registry.released(rid)
    loop.capacity.notify()
    loop.index_dirty.notify()

async def fail(loop: PipelineLoop, rid: str, error: str) -> None:
    a = loop.active.pop(rid)
    await release_everywhere(loop, rid)
    finish_failed(loop, a.request, error)
    loop.changed.notify()

def finish_failed(loop: PipelineLoop, req: Request, error: str) -> None:
    req.state = RequestState.FAILED
    loop.executor.forget(req.id)
    loop.result.failures[req.id] = error
    span = loop.spans.pop(req.id)
    loop.tel.event(span, N.EVENT_FAILED, {N.ERROR: error})
    span.set_attribute(N.FALLBACKS, req.fallbacks)
    loop.tel.end(span, error=error)
    loop.next_arrival()

async def late_fallback(loop: PipelineLoop, rid: str, granted: int, stage: int) -> None:
    """A stage lacked part of the planned prefix: lower the boundary and start the request over."""
    a = loop.active.pop(rid)
    req = a.request
    req.fallbacks += 1
    req.max_reuse_blocks = granted
    req.state = RequestState.WAITING
    loop.tel.event(loop.spans[rid], N.EVENT_FALLBACK, {N.STAGE: stage, N.FROM_BLOCKS: a.reuse_blocks,
                                                       N.REUSE_BLOCKS: granted})
    await release_everywhere(loop, rid)
    loop.waiting.appendleft(req)
    loop.changed.notify()
