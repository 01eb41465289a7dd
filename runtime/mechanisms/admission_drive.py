"""Admission drive: who runs admission rounds (hint -> lease -> escrow), and when.

Two hook points of the loop: ``background`` is one step of the loop's admission task (it is
called again and again, so a policy switched by a knob takes effect at once), and
``before_plan`` runs in the dispatcher right before each wave is planned - on the critical path
(its rounds say so on their spans: the idle time of stage 0 they cover is admission's).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from wavepp.runtime.mechanisms.ports import AdmissionPort
from wavepp.runtime.registry import Registry


class AdmissionDrive(Protocol):
    @property
    def name(self) -> str: ...

    async def background(self, queue: AdmissionPort) -> None:
        """One step of the admission task beside the loop."""
        ...

    async def before_plan(self, queue: AdmissionPort) -> int:
        """Work the dispatcher does before planning a wave; returns prompt tokens admitted by it."""
        ...


ADMISSION = Registry[AdmissionDrive]("admission", doc="who runs admission rounds, and when")


@ADMISSION.register
@dataclass(frozen=True, slots=True)
class AsyncRounds:
    """WavePP: rounds run in their own task, beside the loop, while earlier waves execute
    (the paper's WAVE thread); the dispatcher only plans from what is already admitted.
    When a round admits nothing, the task waits for blocks to be freed (backpressure)."""

    name: str = "async"

    async def background(self, queue: AdmissionPort) -> None:
        if not queue.can_admit():
            await queue.run.changed.wait()
        elif not await queue.admit_once():
            await queue.run.capacity.wait()

    async def before_plan(self, queue: AdmissionPort) -> int:
        return 0


@ADMISSION.register
@dataclass(frozen=True, slots=True)
class InlineRounds:
    """A conventional PP loop: each iteration fetches new requests and schedules them on the
    first rank before the micro-batch runs (TensorRT-LLM ``_executor_loop_pp``: ``_fetch_new_requests``
    then ``_schedule``), so admission sits between two waves."""

    name: str = "inline"

    async def background(self, queue: AdmissionPort) -> None:
        await queue.run.changed.wait()      # nothing to do beside the loop

    async def before_plan(self, queue: AdmissionPort) -> int:
        if not queue.run.num_waiting:
            return 0
        return sum(a.request.num_tokens for a in await queue.admit_once(critical_path=True))
