"""Chunking: the wave budget and how chunks fill it (the planner a policy runs with)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from wavepp.runtime.mechanisms.ports import PlanInputs
from wavepp.runtime.planner import (
    MpuBudget,
    MpuPlanner,
    Planner,
    Position,
    StaticPlanner,
    TimedPlanner,
    WavePlan,
    align_down,
    pack_static,
)
from wavepp.runtime.registry import Registry
from wavepp.runtime.request import AdmittedRequest
from wavepp.runtime.step_times import StepTimes


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


class DynamicPlanner(Planner):
    """SGLang's dynamic chunking for PP (``scheduler_pp_mixin.py``: ``ChunkSizePredictor``; PRs #15372,
    #17198): PP0 fits the prefill latency of a length l as ``f(l) = a·l² + b·l + c``; each next chunk
    of a request at context L is the x with ``f(L + x) - f(L) = f(base) - f(0)`` - the time a fresh
    chunk of ``chunked_prefill_size`` (``base``) takes - smoothed ``base + 0.75·(x - base)``
    (``SGLANG_DYNAMIC_CHUNKING_SMOOTH_FACTOR``), floored at ``base // 4`` and aligned to the block.
    Here ``f`` comes from stage 0's fitted ``t(0, l)`` (``a = α_xx``, ``b = β``), refit online; the
    wave is packed first come first served with that budget (any leftover may take a fragment, as
    SGLang fills a batch). Token packing of ``base`` until stage 0 has a fit."""

    SMOOTH = 0.75

    def __init__(self, base: int, block_size: int, times: StepTimes, position: Position) -> None:
        self.base = base
        self.block_size = block_size
        self.times = times
        self.position = position

    def chunk_tokens(self, context: int) -> int:
        """The dynamic chunk size after ``context`` tokens (``base`` until stage 0 has a fit)."""
        fit = self.times.fit_of(0)
        if fit is None:
            return self.base
        a, b = fit.alpha_xx, fit.beta
        target = a * self.base ** 2 + b * self.base
        q = 2 * a * context + b
        x = target / q if a <= 0 else (math.sqrt(q * q + 4 * a * target) - q) / (2 * a)
        smoothed = self.base + self.SMOOTH * (x - self.base)
        return max(self.base // 4, align_down(int(smoothed), self.block_size), self.block_size)

    def plan(self, admitted: Sequence[AdmittedRequest]) -> WavePlan | None:
        waiting = [a for a in admitted if a.remaining > 0]
        if not waiting:
            return None
        budget = self.chunk_tokens(waiting[0].scheduled)
        chunks = pack_static(admitted, budget, self.block_size, self.position)
        return WavePlan(chunks, budget, sum(a.remaining for a in waiting) / budget) if chunks else None


@CHUNKING.register
@dataclass(frozen=True, slots=True)
class Dynamic:
    """SGLang's dynamic chunking (:class:`DynamicPlanner`): ``static_chunk_tokens`` as
    ``chunked_prefill_size``, each chunk after a long context shrunk to take a fresh chunk's time."""

    name: str = "dynamic"

    def planner(self, inputs: PlanInputs) -> Planner:
        return DynamicPlanner(inputs.knobs.static_chunk_tokens, inputs.block_size, inputs.step_times, inputs.position)
