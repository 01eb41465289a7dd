"""Host work per iteration: what each stage's host does for every wave besides running it.

Work every engine pays per wave (launching kernels, preparing a chunk's inputs, materializing
blocks) is charged to every policy alike. What a conventional PP loop *adds* runs on every rank,
in lockstep, each iteration (TensorRT-LLM ``_executor_loop_pp``):

* the schedule relayed rank to rank (``_pp_schedule_and_propagate``: ``recv_object`` from the
  previous rank, then send on) - one control message per stage;
* the scheduler re-run locally over the active requests (``schedule_request``; #9659, #10665);
* a radix walk of the KV cache per pending first-chunk request on every scheduler pass
  (``capacityScheduler`` -> reusable-block count, PR #13095: "non-negligible at high
  concurrency");
* a full copy of each scheduled context request's prompt when preparing inputs
  (``_prepare_tp_inputs``).

Each is real work on the stage (:meth:`runtime.kvcache.handle.StageHandle.host_iteration`): the
walk runs over the stage's own tree; the sim charges the measured per-unit costs
(:mod:`runtime.engines.coordination`), scaled by ``host_work_scale`` for sensitivity studies.
It runs in the stage's preparation of the wave (one wave ahead of its execution), so it costs
time only when it outlasts the step it overlaps - as the host runs ahead of the device there.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from wavepp.runtime.mechanisms.ports import StagePort
from wavepp.runtime.registry import Registry
from wavepp.runtime.request import Wave


class HostWork(Protocol):
    @property
    def name(self) -> str: ...

    async def per_wave(self, stage: StagePort, wave: Wave) -> None:
        """``stage``'s host work for ``wave``, before it prepares the wave's chunks."""
        ...


HOST = Registry[HostWork]("host", doc="per-wave host work on every stage")


@HOST.register
@dataclass(frozen=True, slots=True)
class Overlapped:
    """WavePP: nothing per wave beyond what every engine does - the plan comes with the wave
    and admission ran beforehand, beside the loop."""

    name: str = "none"

    async def per_wave(self, stage: StagePort, wave: Wave) -> None:
        return None


@HOST.register
@dataclass(frozen=True, slots=True)
class Lockstep:
    """TensorRT-LLM's per-iteration host work on every rank (see the module docstring)."""

    name: str = "lockstep"

    async def per_wave(self, stage: StagePort, wave: Wave) -> None:
        run = stage.run
        await stage.handle.host_iteration(run.pending_first_chunks(), run.prompt_tokens(wave), run.num_active)
