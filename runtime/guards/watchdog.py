"""Deadlock guard: a run in which nothing happens while work waits ends with a diagnosis.

"Nothing happens" means: no request admitted, finished or failed, no wave planned, and no stage
computing, for ``timeout_s`` seconds of the run's clock (virtual on the sim, the wall clock
otherwise). A stage in the middle of a long step is progress, so the guard never fires on a slow
model; it fires only when every task of the loop is waiting on another - the failure a
pipeline with per-stage caches can fall into when its admission and its capacity wait on each
other. The run then ends with :class:`Stalled`, whose one-line message says what is waiting, on
which stage, and for what, instead of spinning silently.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from wavepp.runtime.clock import now
from wavepp.runtime.kvcache.handle import StageHandle
from wavepp.runtime.request import cdiv
from wavepp.runtime.run_state import RunState

DEFAULT_STALL_TIMEOUT_S = 60.0


class Stalled(RuntimeError):
    """The run made no progress for the watchdog's timeout while work was waiting."""


async def watch(run: RunState, handles: Sequence[StageHandle], block_size: int, timeout_s: float) -> None:
    """Raise :class:`Stalled` once ``run`` has had work and no progress for ``timeout_s``."""
    last, since = run.progress_mark(), now()
    while True:
        await asyncio.sleep(timeout_s / 4)
        mark = run.progress_mark()
        if mark != last or run.executing or not run.has_work():
            last, since = mark, now()
            continue
        if now() - since >= timeout_s:
            raise Stalled(await diagnose(run, handles, block_size, now() - since))


async def diagnose(run: RunState, handles: Sequence[StageHandle], block_size: int, idle_s: float) -> str:
    """One line: the waiting queue's head, what is admitted and in flight, and each stage's blocks."""
    b = block_size
    parts = [f"no progress for {idle_s:.0f} s with work waiting"]
    head = run.head()
    if head is not None:
        parts.append(f"{run.num_waiting} waiting for admission (head {head.id}: {head.num_tokens} tokens, "
                     f"{cdiv(head.num_tokens, b)} blocks)")
    parts.append(f"{run.num_active} admitted, {run.in_flight} waves in flight")
    stats = await asyncio.gather(*(h.stats() for h in handles))
    for h, st in zip(handles, stats, strict=True):
        parts.append(f"stage {h.stage}: {st.num_free} free + {st.num_evictable} evictable of {st.num_blocks} "
                     f"blocks, {st.num_leases} leases, {st.num_escrowed_blocks} escrowed")
    return "; ".join(parts)
