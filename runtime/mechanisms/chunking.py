"""Chunking: the wave budget and how chunks fill it (the planner a policy runs with)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from wavepp.runtime.mechanisms.ports import PlanInputs
from wavepp.runtime.planner import MpuBudget, MpuPlanner, Planner, StaticPlanner, TimedPlanner
from wavepp.runtime.registry import Registry


class Chunking(Protocol):
    @property
    def name(self) -> str: ...

    def planner(self, inputs: PlanInputs) -> Planner:
        ...


CHUNKING = Registry[Chunking]("chunking", doc="the wave budget and how chunks fill it")


def mpu_budget(inputs: PlanInputs) -> MpuBudget:
    k = inputs.knobs
    return MpuBudget(k.max_wave_tokens, k.min_wave_tokens, inputs.block_size, inputs.ring, k.fill_factor,
                     inputs.num_stages, k.hysteresis)


@CHUNKING.register
@dataclass(frozen=True, slots=True)
class Mpu:
    """WavePP's MPU wave budget (DESIGN §2: M, b_min, target S = R + (F-1)·P, hysteresis) with
    FCFS packing that never fills a small leftover with a fragment shorter than max(b_min, b/2)."""

    name: str = "mpu"

    def planner(self, inputs: PlanInputs) -> Planner:
        return MpuPlanner(mpu_budget(inputs), inputs.knobs.min_wave_tokens, inputs.block_size, inputs.position)


@CHUNKING.register
@dataclass(frozen=True, slots=True)
class Static:
    """A fixed budget per wave, ``static_chunk_tokens`` (TensorRT-LLM's ``max_num_tokens``,
    default 8192), FCFS context chunking (``_chunk_fcfs``; a truncated chunk rounded down to the
    block unit, any leftover may take a fragment)."""

    name: str = "static"

    def planner(self, inputs: PlanInputs) -> Planner:
        return StaticPlanner(inputs.knobs.static_chunk_tokens, inputs.block_size, inputs.position)


@CHUNKING.register
@dataclass(frozen=True, slots=True)
class Timed:
    """MPU's budget and fill target, spent in time (beyond the paper, whose wave budget counts
    tokens - its stated limit on long reused contexts): each wave takes on every stage what ``b``
    new tokens after no context take there, by the stage's fitted ``t(L, x)``, refit online from
    the steps it ran (:func:`runtime.planner.pack_timed`). SGLang's dynamic chunking solves the same
    equation for one request with a fitted quadratic (``scheduler_pp_mixin.py``, PR #15372); this
    packs a whole wave and keeps MPU's fill target."""

    name: str = "timed"

    def planner(self, inputs: PlanInputs) -> Planner:
        return TimedPlanner(mpu_budget(inputs), inputs.knobs.min_wave_tokens, inputs.block_size, inputs.step_times,
                            inputs.position)
