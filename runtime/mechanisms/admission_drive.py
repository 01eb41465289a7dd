"""Admission drive: who runs admission rounds (hint -> lease -> escrow), and when.

Two hook points of the loop: ``background`` is one step of the loop's admission task (it is
called again and again, so a policy switched by a knob takes effect at once), and
``before_plan`` runs in the dispatcher right before each wave is planned - on the critical path.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from runtime.loop import PipelineLoop


class AdmissionDrive(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def inline(self) -> bool:
        """Rounds run on the loop's critical path (reported as admission on the critical path)."""
        ...

    async def background(self, loop: PipelineLoop) -> None:
        """One step of the admission task beside the loop."""
        ...

    async def before_plan(self, loop: PipelineLoop) -> int:
        """Work the dispatcher does before planning a wave; returns prompt tokens admitted by it."""
        ...


@dataclass(frozen=True, slots=True)
class AsyncRounds:
    """WavePP: rounds run in their own task, beside the loop, while earlier waves execute
    (the paper's WAVE thread); the dispatcher only plans from what is already admitted.
    When a round admits nothing, the task waits for blocks to be freed (backpressure)."""

    name: str = "async"
    inline: bool = False

    async def background(self, loop: PipelineLoop) -> None:
        if not loop.waiting or len(loop.active) >= loop.knobs.max_leases:
            await loop.changed.wait()
        elif not await loop.admit_once():
            await loop.capacity.wait()

    async def before_plan(self, loop: PipelineLoop) -> int:
        return 0


@dataclass(frozen=True, slots=True)
class InlineRounds:
    """A conventional PP loop: each iteration fetches new requests and schedules them on the
    first rank before the micro-batch runs (TensorRT-LLM ``_executor_loop_pp``: ``_fetch_new_requests``
    then ``_schedule``), so admission sits between two waves."""

    name: str = "inline"
    inline: bool = True

    async def background(self, loop: PipelineLoop) -> None:
        await loop.changed.wait()           # nothing to do beside the loop

    async def before_plan(self, loop: PipelineLoop) -> int:
        if not loop.waiting:
            return 0
        before = set(loop.active)
        await loop.admit_once()
        return sum(a.request.num_tokens for rid, a in loop.active.items() if rid not in before)
