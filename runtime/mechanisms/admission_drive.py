"""Admission drive: who runs admission rounds (hint -> lease -> escrow), and when.

Two hook points of the loop: ``background`` is one step of the loop's admission task (it is
called again and again, so a policy switched by a knob takes effect at once), and
``before_plan`` runs in the dispatcher right before each wave is planned - on the critical path.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from wavepp.runtime.admission import AdmissionQueue


class AdmissionDrive(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def inline(self) -> bool:
        """Rounds run on the loop's critical path (reported as admission on the critical path)."""
        ...

    async def background(self, queue: AdmissionQueue) -> None:
        """One step of the admission task beside the loop."""
        ...

    async def before_plan(self, queue: AdmissionQueue) -> int:
        """Work the dispatcher does before planning a wave; returns prompt tokens admitted by it."""
        ...


@dataclass(frozen=True, slots=True)
class AsyncRounds:
    """WavePP: rounds run in their own task, beside the loop, while earlier waves execute
    (the paper's WAVE thread); the dispatcher only plans from what is already admitted.
    When a round admits nothing, the task waits for blocks to be freed (backpressure)."""

    name: str = "async"
    inline: bool = False

    async def background(self, queue: AdmissionQueue) -> None:
        if not queue.can_admit():
            await queue.run.changed.wait()
        elif not await queue.admit_once():
            await queue.run.capacity.wait()

    async def before_plan(self, queue: AdmissionQueue) -> int:
        return 0


@dataclass(frozen=True, slots=True)
class InlineRounds:
    """A conventional PP loop: each iteration fetches new requests and schedules them on the
    first rank before the micro-batch runs (TensorRT-LLM ``_executor_loop_pp``: ``_fetch_new_requests``
    then ``_schedule``), so admission sits between two waves."""

    name: str = "inline"
    inline: bool = True

    async def background(self, queue: AdmissionQueue) -> None:
        await queue.run.changed.wait()      # nothing to do beside the loop

    async def before_plan(self, queue: AdmissionQueue) -> int:
        if not queue.run.num_waiting:
            return 0
        return sum(a.request.num_tokens for a in await queue.admit_once())
