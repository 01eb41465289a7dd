"""Ports: what a mechanism sees of the loop, as Protocols.

A mechanism never imports the loop's modules (admission, stage tasks, completion, the loop): it
gets one of these and asks its questions through it. The loop's classes satisfy them
structurally (``AdmissionQueue`` is an :class:`AdmissionPort`, ``StageWorker`` a
:class:`StagePort`); a test can hand a mechanism a small fake instead.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Protocol

from wavepp.runtime.clock import Wakeup
from wavepp.runtime.kvcache.handle import StageHandle
from wavepp.runtime.planning.planner import Position, Waiting, nothing_waiting
from wavepp.runtime.planning.step_times import StepTimes
from wavepp.runtime.request import AdmittedRequest, Wave


class WaveSettings(Protocol):
    """The scheduling knobs a chunking or a ring reads (``runtime.control.knobs.Knobs`` is one)."""

    @property
    def max_wave_tokens(self) -> int: ...
    @property
    def min_wave_tokens(self) -> int: ...
    @property
    def fill_factor(self) -> int: ...
    @property
    def hysteresis(self) -> bool: ...
    @property
    def static_chunk_tokens(self) -> int: ...
    @property
    def ring(self) -> int:
        """Waves in flight; 0: the policy's own ring."""
        ...


@dataclass(frozen=True, slots=True)
class PlanInputs:
    """What a chunking builds its planner from: the knobs, the pipeline's shape, where the token
    charge starts (``position``) and the stages' step times (fitted, refit online)."""

    knobs: WaveSettings
    num_stages: int
    block_size: int
    ring: int
    position: Position
    step_times: StepTimes
    waiting: Waiting = nothing_waiting     # the requests waiting for admission (the timed chunking's busy period)


class RunView(Protocol):
    """The questions a mechanism asks of the run state (``runtime.run_state.RunState`` is one)."""

    @property
    def num_waiting(self) -> int: ...
    @property
    def num_active(self) -> int: ...
    @property
    def in_flight(self) -> int: ...
    @property
    def admitting(self) -> int: ...
    @property
    def first_stage_backlog(self) -> int: ...
    @property
    def changed(self) -> Wakeup: ...
    @property
    def capacity(self) -> Wakeup: ...

    def holds(self, a: AdmittedRequest) -> bool: ...
    def completes_ahead(self, wave_id: int) -> bool: ...
    def admitted_under_others(self, policy: str) -> bool: ...
    def unscheduled_tokens(self) -> int: ...
    def pending_first_chunks(self) -> list[list[int]]: ...
    def prompt_tokens(self, wave: Wave) -> int: ...


class AdmissionPort(Protocol):
    """What an admission drive runs rounds through (``runtime.admission.AdmissionQueue``)."""

    @property
    def run(self) -> RunView: ...

    def can_admit(self) -> bool:
        """Requests wait and the lease cap leaves room for some."""
        ...

    async def admit_once(self, critical_path: bool = False) -> list[AdmittedRequest]:
        """One round over the head of the line; what it admitted. ``critical_path``: the loop waits
        for this round (its span says so: idle time of stage 0 it covers is admission's)."""
        ...


class StagePort(Protocol):
    """What a stage-local mechanism (stage admission, host work) sees of one stage
    (``runtime.stage_tasks.StageWorker``)."""

    @property
    def stage(self) -> int: ...
    @property
    def block_size(self) -> int: ...
    @property
    def handle(self) -> StageHandle:
        """The stage's cache and host, one message per operation."""
        ...
    @property
    def run(self) -> RunView: ...

    def span(self, name: str, attributes: dict[str, Any]) -> AbstractContextManager[Any]:
        """A span of this stage's work (e.g. a wait for KV capacity)."""
        ...


class LastStage(Protocol):
    """What a return path needs of the last stage."""

    async def return_sample_state(self) -> None: ...
