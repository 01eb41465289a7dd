"""The stages' share of a runtime status snapshot: each stage's cache counts, one message each."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from wavepp.runtime.kvcache.handle import StageHandle
from wavepp.store.records import StageStatus


async def stage_statuses(handles: Sequence[StageHandle]) -> tuple[StageStatus, ...]:
    """Per stage: blocks, cached, free, leases, escrowed blocks and evictions so far."""
    stats = await asyncio.gather(*(h.stats() for h in handles))
    return tuple(StageStatus(h.stage, st.num_blocks, st.num_cached, st.num_free, st.num_leases,
                             st.num_escrowed_blocks, st.num_evictions)
                 for h, st in zip(handles, stats, strict=True))
