"""Stage residency -> the shared hint index.

Stages record attach/detach events as they happen; the publisher sends them, for all stages at
once, off the critical path. One lock keeps the events of a stage in the order they happened.
After a store outage the index is rebuilt from the stages' own reuse trees.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from runtime.engines.base import StageHandle
from store.base import Store


class IndexPublisher:
    def __init__(self, handles: Sequence[StageHandle], store: Store) -> None:
        self.handles = list(handles)
        self.store = store
        self._lock = asyncio.Lock()

    async def flush(self) -> int:
        """Send every stage's pending events in one call; returns how many."""
        async with self._lock:
            updates = []
            for h in self.handles:
                attached, detached = h.cache.drain_index_updates()
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
                        by_stage[stage].cache.requeue_index_updates(attached, detached)
                    raise
            return sum(len(a) + len(d) for _, a, d in updates)

    async def rebuild(self) -> None:
        """Replace the index with what the stages hold now (after an outage lost updates)."""
        async with self._lock:
            for h in self.handles:
                h.cache.drain_index_updates()            # included in the snapshot below
            await self.store.hint_clear()
            await self.store.hint_update_many(
                [(h.stage, list(h.cache.pool.by_hash), []) for h in self.handles])
