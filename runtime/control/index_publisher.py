"""Stage residency -> the shared hint index.

Stages record attach/detach events as they happen; the publisher sends them, for all stages at
once, off the critical path. One lock keeps the events of a stage in the order they happened.
After a store outage the index is rebuilt from the stages' own reuse trees.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from wavepp.runtime.kvcache.handle import StageHandle, on_stages
from wavepp.store.base import Store


class IndexPublisher:
    def __init__(self, handles: Sequence[StageHandle], store: Store) -> None:
        self.handles = list(handles)
        self.store = store
        self._lock = asyncio.Lock()

    async def flush(self) -> int:
        """Send every stage's pending events in one call; returns how many."""
        async with self._lock:
            updates = []
            drain = asyncio.ensure_future(on_stages(self.handles, lambda h: h.drain_index_updates(), charged=False))
            try:
                drained = await asyncio.shield(drain)
            except asyncio.CancelledError:      # events already drained must not be lost: put them back
                for h, (attached, detached) in zip(self.handles, await drain, strict=True):
                    await h.requeue_index_updates(attached, detached)
                raise
            for h, (attached, detached) in zip(self.handles, drained, strict=True):
                if attached or detached:
                    updates.append((h.stage, attached, detached))
            if updates:
                try:
                    await self.store.hint_update_many(updates)
                except BaseException:
                    # Not sent (shutdown mid-call, store gone): the events go back in front of
                    # newer ones, so the next flush carries them. Counters commute, so merging
                    # two batches' attach/detach lists leaves the same final counts.
                    by_stage = {h.stage: h for h in self.handles}
                    for stage, attached, detached in updates:
                        await asyncio.shield(by_stage[stage].requeue_index_updates(attached, detached))
                    raise
            return sum(len(a) + len(d) for _, a, d in updates)

    async def rebuild(self) -> None:
        """Replace the index with what the stages hold now (after an outage lost updates)."""
        async with self._lock:
            snapshots = await on_stages(self.handles, lambda h: h.index_snapshot(), charged=False)
            await self.store.hint_clear()
            await self.store.hint_update_many(
                [(h.stage, held, []) for h, held in zip(self.handles, snapshots, strict=True)])
