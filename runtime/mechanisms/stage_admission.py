"""Stage admission: which stages lease and escrow when a request is admitted, and what a stage
does before it prepares a chunk of a request it was not part of.

The hook answers a typed verdict the stage worker acts on: :data:`READY` (prepare the chunk),
:class:`FallBack` (a stage that admits late lacks part of the prefix the first stage promised: the
request's boundary is lowered and it starts over), :class:`Readmit` (the request cannot get room
here before it blocks the stage, and only because requests admitted under another policy hold it:
it goes back to admission), :class:`Fail`, or :class:`Halt` (the policy's source would stop the
whole run here).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from wavepp.runtime.kvcache.handle import LeaseItem
from wavepp.runtime.mechanisms.ports import StagePort
from wavepp.runtime.mechanisms.reserve import Reserve
from wavepp.runtime.registry import Registry
from wavepp.runtime.request import AdmittedRequest, Chunk
from wavepp.telemetry import names as N


@dataclass(frozen=True, slots=True)
class Ready:
    """Prepare the chunk."""


@dataclass(frozen=True, slots=True)
class FallBack:
    """The stage holds only ``granted`` blocks of the planned prefix: lower the boundary, start over."""

    granted: int


@dataclass(frozen=True, slots=True)
class Readmit:
    """Release the request everywhere and send it back to admission, boundary unchanged."""

    reason: str


@dataclass(frozen=True, slots=True)
class Fail:
    """End the request with ``reason``."""

    reason: str


@dataclass(frozen=True, slots=True)
class Halt:
    """The policy's source would stop the whole run here (``reason``): the request fails, and the
    run's figures are its figures up to this point (:func:`runtime.figures.report.compute_figures`). The
    runtime itself goes on (a server keeps serving the others)."""

    reason: str


StageVerdict = Ready | FallBack | Readmit | Fail | Halt
# How a Halt's reason ends: where the source would stop, not a failure of this runtime.
SOURCE_STOPS = ("(TensorRT-LLM raises here without a KV cache transceiver: _pp_retry_until_can_schedule; "
                "its executor loop stops)")
READY = Ready()


class StageAdmission(Protocol):
    @property
    def name(self) -> str: ...

    def admit_stages(self, num_stages: int) -> list[int]:
        """The stages an admission round leases and escrows on."""
        ...

    async def before_chunk(self, stage: StagePort, wave_id: int, a: AdmittedRequest, chunk: Chunk,
                           reserve: Reserve) -> StageVerdict:
        """``stage`` is about to prepare ``chunk`` of wave ``wave_id``: what to do with it.
        ``reserve``: what a stage escrowing here sets aside (the request's own policy's). A chunk
        whose request is no longer live afterwards is skipped by the caller."""
        ...


STAGE_ADMISSION = Registry[StageAdmission]("stage-admission", doc="which stages lease + escrow at admission")


@STAGE_ADMISSION.register
@dataclass(frozen=True, slots=True)
class EveryStage:
    """WavePP: lease + escrow on every stage at admission, so a chunk never meets a stage that
    has not agreed to its boundary and its room."""

    name: str = "every-stage"

    def admit_stages(self, num_stages: int) -> list[int]:
        return list(range(num_stages))

    async def before_chunk(self, stage: StagePort, wave_id: int, a: AdmittedRequest, chunk: Chunk,
                           reserve: Reserve) -> StageVerdict:
        return READY


@STAGE_ADMISSION.register
@dataclass(frozen=True, slots=True)
class OnFirstChunk:
    """A conventional PP loop: admission allocates on the first rank only; each other rank
    calls ``add_sequence`` in its own ``prepare_resources`` when the request's first chunk
    reaches it, matching the prefix alone, and waits when it cannot fit the schedule
    (``_pp_retry_until_can_schedule``, "may cause bubbles"); nothing reconciles different
    reusable lengths across ranks (``resource_manager.py``), so a rank that lacks part of the
    first rank's prefix forces a late fall back to the lowest common boundary (DESIGN §3).

    When no wave ahead will free room, ``_pp_retry_until_can_schedule`` raises RuntimeError without
    a KV cache transceiver (aggregated serving) and the executor's event loop ends on it
    (``PyExecutor._event_loop_wrapper`` logs and re-raises): the run would stop there - a
    :class:`Halt`. Except when requests admitted under another policy (a ``policy`` knob change)
    share the stage's pool: their escrow, not this policy's own schedule, holds the room, so the
    request is re-admitted."""

    name: str = "first-chunk"

    def admit_stages(self, num_stages: int) -> list[int]:
        return [0]

    async def before_chunk(self, stage: StagePort, wave_id: int, a: AdmittedRequest, chunk: Chunk,
                           reserve: Reserve) -> StageVerdict:
        s, run = stage.stage, stage.run
        if s in a.admit_stages or s in a.local_stages:
            return READY
        req, handle = a.request, stage.handle

        async def dropped_meanwhile() -> bool:
            """The request failed or fell back on another stage while this one waited: what it
            took here is released (the release everywhere may have run before it took it)."""
            if run.holds(a):
                return False
            await handle.release([req.id], remote=False)
            return True

        follows = a.follows              # a follower leases on through its producer's blocks here too
        item = (LeaseItem(req.id, req.block_hashes, a.followed_from, req.num_tokens, (follows.id, chunk.reuse_blocks))
                if follows is not None else LeaseItem(req.id, req.block_hashes, chunk.reuse_blocks, req.num_tokens))
        [granted] = await handle.lease([item], remote=False)
        a.local_stages.add(s)              # released everywhere on failure or fallback, like the rest
        if await dropped_meanwhile():
            return READY
        if granted < chunk.reuse_blocks:
            return FallBack(granted)
        need = reserve.blocks(req.num_tokens, granted, stage.block_size)
        while not (await handle.escrow([(req.id, need)], remote=False, held_prefix=reserve.held_prefix)).all:
            if not run.completes_ahead(wave_id):
                why = f"stage {s} lacks KV capacity for stage 0's schedule of request {req.id}"
                if run.admitted_under_others(a.policy):
                    return Readmit(why)
                return Halt(f"{why} {SOURCE_STOPS}")
            with stage.span(N.STAGE_WAIT, {N.STAGE: s, N.REQUEST_ID: req.id}):
                await run.capacity.wait()
            if await dropped_meanwhile():
                return READY
        await dropped_meanwhile()          # the escrow message may have landed after a release
        return READY


@STAGE_ADMISSION.register
@dataclass(frozen=True, slots=True)
class CentralStage:
    """One manager admits for every stage (``kvcache.pools.CentralManager``): the lease and escrow on it are
    every stage's, so no stage admits late and none falls back (vLLM v1's scheduler; SGLang's lockstep
    replicas). Switched to on a run whose stages keep caches of their own (the pool is fixed for a run), a
    stage that is not a mirror admits on the request's first chunk, as a conventional loop does."""

    name: str = "central"

    def admit_stages(self, num_stages: int) -> list[int]:
        return [0]

    async def before_chunk(self, stage: StagePort, wave_id: int, a: AdmittedRequest, chunk: Chunk,
                           reserve: Reserve) -> StageVerdict:
        if stage.handle.mirrored:
            return READY
        return await OnFirstChunk().before_chunk(stage, wave_id, a, chunk, reserve)

