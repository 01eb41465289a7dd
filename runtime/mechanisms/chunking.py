"""Chunking: the wave budget and how chunks fill it (the planner a policy runs with)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from wavepp.runtime.mechanisms.ports import PlanInputs
from wavepp.runtime.planning.cost import CostPlanner
from wavepp.runtime.planning.planner import (
    MpuBudget,
    MpuPlanner,
    Planner,
    Position,
    Room,
    StaticPlanner,
    WavePlan,
    WholePlanner,
    align_down,
    pack_static,
    static_room,
)
from wavepp.runtime.planning.step_times import StepTimes
from wavepp.runtime.planning.timed import TimedPlanner
from wavepp.runtime.registry import Registry
from wavepp.runtime.request import AdmittedRequest


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
    block unit, any leftover may take a fragment). ``tokens``: an engine's own default budget instead
    of the knob (0: the knob)."""

    name: str = "static"
    tokens: int = 0

    def planner(self, inputs: PlanInputs) -> Planner:
        return StaticPlanner(self.tokens or inputs.knobs.static_chunk_tokens, inputs.block_size, inputs.position)


# The budget vLLM v1 and SGLang (without dynamic chunking) default to on a GPU of 160 GiB or more (B300):
# vLLM's ``max_num_batched_tokens`` 16384 for the LLM class and the API server alike
# (``EngineArgs.get_batch_defaults``; FCFS, running requests first, each chunk as large as the budget left,
# ``long_prefill_token_threshold`` 0), SGLang's ``chunked_prefill_size`` 16384 (``arg_groups/memory_hook.py``):
# the same packing.
STATIC_16K = CHUNKING.register(Static("static-16384", 16384))


@CHUNKING.register
@dataclass(frozen=True, slots=True)
class Whole:
    """No chunked prefill (TensorRT-LLM's LLM API default, ``enable_chunked_prefill=False``): a fixed budget
    per wave, ``static_chunk_tokens`` (``max_num_tokens``, default 8192) or ``tokens``, each request's whole
    uncached suffix in one wave, FCFS up to the first that does not fit; a longer prompt is refused at
    arrival (:class:`~runtime.planning.planner.WholePlanner`)."""

    name: str = "whole"
    tokens: int = 0

    def planner(self, inputs: PlanInputs) -> Planner:
        return WholePlanner(self.tokens or inputs.knobs.static_chunk_tokens, inputs.block_size, inputs.position)


@CHUNKING.register
@dataclass(frozen=True, slots=True)
class Timed:
    """MPU's budget and fill target, spent in time (beyond the paper, whose wave budget counts
    tokens - its stated limit on long reused contexts): each wave takes on the slowest stage what
    ``b`` tokens of the admitted work take on average, by each stage's fitted ``t(L, x)``, refit
    online from the steps it ran (:func:`~runtime.planning.timed.bottleneck`,
    :func:`~runtime.planning.timed.pack_timed`) - where that shortens the busy period
    (:func:`~runtime.planning.timed.time_pays`: near a drain; a long stream is packed in MPU's tokens,
    which do the same work in fewer, larger chunks).
    SGLang's dynamic chunking solves a like equation for one request with a fitted quadratic, its
    target a fresh chunk's time (``scheduler_pp_mixin.py``, PR #15372); this packs a whole wave to
    the work's mean time, so it runs about MPU's number of waves and keeps its fill target."""

    name: str = "timed"

    def planner(self, inputs: PlanInputs) -> Planner:
        return TimedPlanner(mpu_budget(inputs), inputs.knobs.min_wave_tokens, inputs.block_size, inputs.step_times,
                            inputs.num_stages, inputs.position, inputs.waiting)


@CHUNKING.register
@dataclass(frozen=True, slots=True)
class Cost:
    """The budget under which the pipeline is predicted to compute most (beyond the paper): each candidate of
    MPU's ladder, down to one block, priced by the stages' step times (the engine's own model, else the fits
    refit online) and by how busy the work in the system keeps the stages (:mod:`runtime.planning.cost`);
    MPU's hysteresis and its rule against small fragments. Small waves where little work would leave
    stages idle, large ones where the stages stay busy anyway."""

    name: str = "cost"

    def planner(self, inputs: PlanInputs) -> Planner:
        return CostPlanner(mpu_budget(inputs), inputs.knobs.min_wave_tokens, inputs.block_size, inputs.step_times,
                           inputs.num_stages, inputs.position)


class DynamicPlanner(Planner):
    """SGLang's dynamic chunking for PP (``scheduler_pp_mixin.py``: ``ChunkSizePredictor``; PRs #15372,
    #17198): PP0 fits the prefill latency of a length l as ``f(l) = a·l² + b·l + c``; each next chunk
    of a request at context L is the x with ``f(L + x) - f(L) = f(base) - f(0)`` - the time a fresh
    chunk of ``chunked_prefill_size`` (``base``) takes - smoothed ``base + 0.75·(x - base)``
    (``SGLANG_DYNAMIC_CHUNKING_SMOOTH_FACTOR``), floored at ``base // 4`` and aligned to the block.
    Here ``f`` comes from stage 0's fitted ``t(0, l)`` (``a = α_xx``, ``b = β``), taken once - SGLang fits
    at startup from 128 profiled prefills and never refits - and the wave is packed first come first served
    with that budget (any leftover may take a fragment, as SGLang fills a batch). Only a continuing chunk
    is resized (SGLang sizes ``chunked_req`` by its ``prefix_len``; a request's first chunk gets ``base``,
    whatever its cached prefix). Token packing of ``base`` until stage 0 has a fit."""

    SMOOTH = 0.75

    def __init__(self, base: int, block_size: int, times: StepTimes, position: Position) -> None:
        self.base = base
        self.block_size = block_size
        self.times = times
        self.position = position
        self._fit: tuple[float, float] | None = None     # (a, b) of stage 0's first fit, kept

    def chunk_tokens(self, context: int) -> int:
        """The dynamic chunk size after ``context`` tokens (``base`` until stage 0 has a fit)."""
        if self._fit is None:
            fit = self.times.fit_of(0)
            if fit is None:
                return self.base
            self._fit = (fit.alpha_xx, fit.beta)
        a, b = self._fit
        target = a * self.base ** 2 + b * self.base
        q = 2 * a * context + b
        x = target / q if a <= 0 else (math.sqrt(q * q + 4 * a * target) - q) / (2 * a)
        smoothed = self.base + self.SMOOTH * (x - self.base)
        return max(self.base // 4, align_down(int(smoothed), self.block_size), self.block_size)

    def plan(self, admitted: Sequence[AdmittedRequest]) -> WavePlan | None:
        waiting = [a for a in admitted if a.remaining > 0]
        if not waiting:
            return None
        budget = self._budget(waiting[0])
        chunks = pack_static(admitted, budget, self.block_size, self.position)
        return WavePlan(chunks, budget, sum(a.remaining for a in waiting) / budget) if chunks else None

    def _budget(self, head: AdmittedRequest) -> int:
        """The wave's budget: the head request's continuing chunk resized, a first chunk ``base``."""
        return self.chunk_tokens(head.scheduled) if head.scheduled > head.reused_tokens else self.base

    def room(self, admitted: Sequence[AdmittedRequest]) -> Room | None:
        waiting = [a for a in admitted if a.remaining > 0]
        budget = self._budget(waiting[0]) if waiting else self.base
        return static_room(admitted, budget, self.block_size, self.position)


@CHUNKING.register
@dataclass(frozen=True, slots=True)
class Dynamic:
    """SGLang's dynamic chunking (:class:`DynamicPlanner`): ``static_chunk_tokens`` (or ``tokens``) as
    ``chunked_prefill_size``, each chunk after a long context shrunk to take a fresh chunk's time."""

    name: str = "dynamic"
    tokens: int = 0

    def planner(self, inputs: PlanInputs) -> Planner:
        return DynamicPlanner(self.tokens or inputs.knobs.static_chunk_tokens, inputs.block_size, inputs.step_times,
                              inputs.position)


# SGLang's ``chunked_prefill_size`` on a GPU of 160 GiB or more (B300): 16384 (``arg_groups/memory_hook.py``,
# 0.5.23); dynamic chunking is ``--enable-dynamic-chunking`` (off by default; the PP docs recommend it).
SGLANG_DYNAMIC = CHUNKING.register(Dynamic("dynamic-16384", 16384))
