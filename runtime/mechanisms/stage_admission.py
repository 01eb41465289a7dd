"""Stage admission: which stages lease and escrow when a request is admitted, and what a stage
does before it prepares a chunk of a request it was not part of.

A stage that admits late may lack part of the prefix the first stage promised: it answers with
what it has (:class:`LateFallback`), the request's boundary is lowered and it starts over.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from runtime.engines.base import LeaseItem
from runtime.kvcache.stage_cache import DescriptorMismatch
from runtime.request import AdmittedRequest, Chunk
from telemetry import names as N

if TYPE_CHECKING:
    from runtime.stage_tasks import StageWorker


class LateFallback(Exception):
    """A stage holds less of the planned prefix than the first stage promised."""

    def __init__(self, granted: int) -> None:
        super().__init__(granted)
        self.granted = granted


class StageAdmission(Protocol):
    @property
    def name(self) -> str: ...

    def admit_stages(self, num_stages: int) -> list[int]:
        """The stages an admission round leases and escrows on."""
        ...

    async def before_chunk(self, stage: StageWorker, wave_id: int, a: AdmittedRequest, chunk: Chunk) -> None:
        """``stage`` is about to prepare ``chunk`` of wave ``wave_id``; may raise DescriptorMismatch
        or LateFallback. A chunk whose request is no longer live afterwards is skipped by the caller."""
        ...


@dataclass(frozen=True, slots=True)
class EveryStage:
    """WavePP: lease + escrow on every stage at admission, so a chunk never meets a stage that
    has not agreed to its boundary and its room."""

    name: str = "every-stage"

    def admit_stages(self, num_stages: int) -> list[int]:
        return list(range(num_stages))

    async def before_chunk(self, stage: StageWorker, wave_id: int, a: AdmittedRequest, chunk: Chunk) -> None:
        return None


@dataclass(frozen=True, slots=True)
class OnFirstChunk:
    """A conventional PP loop: admission allocates on the first rank only; each other rank
    calls ``add_sequence`` in its own ``prepare_resources`` when the request's first chunk
    reaches it, matching the prefix alone, and waits when it cannot fit the schedule
    (``_pp_retry_until_can_schedule``, "may cause bubbles"); nothing reconciles different
    reusable lengths across ranks (``resource_manager.py``), so a rank that lacks part of the
    first rank's prefix forces a late fall back to the lowest common boundary (DESIGN §3)."""

    name: str = "first-chunk"

    def admit_stages(self, num_stages: int) -> list[int]:
        return [0]

    async def before_chunk(self, stage: StageWorker, wave_id: int, a: AdmittedRequest, chunk: Chunk) -> None:
        s, run = stage.stage, stage.run
        if s in a.admit_stages or s in a.local_stages:
            return
        req, handle = a.request, stage.handle

        async def dropped_meanwhile() -> bool:
            """The request failed or fell back on another stage while this one waited: what it
            took here is released (the release everywhere may have run before it took it)."""
            if run.holds(a):
                return False
            await handle.release([req.id], remote=False)
            return True

        [granted] = await handle.lease([LeaseItem(req.id, req.block_hashes, chunk.reuse_blocks, req.num_tokens)],
                                       remote=False)
        a.local_stages.add(s)              # released everywhere on failure or fallback, like the rest
        if await dropped_meanwhile():
            return
        if granted < chunk.reuse_blocks:
            raise LateFallback(granted)
        need = stage.policy().reserve.blocks(req.num_tokens, granted, stage.block_size)
        while not await handle.escrow([(req.id, need)], remote=False):
            if not run.completes_ahead(wave_id):
                raise DescriptorMismatch(f"stage {s} lacks KV capacity for stage 0's schedule of request {req.id}")
            with stage.tel.span(N.STAGE_WAIT, {N.STAGE: s, N.REQUEST_ID: req.id}):
                await run.capacity.wait()
            if await dropped_meanwhile():
                return
        await dropped_meanwhile()          # the escrow message may have landed after a release
