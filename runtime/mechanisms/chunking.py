"""Chunking: the wave budget and how chunks fill it (the planner a policy runs with)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from wavepp.runtime.mechanisms.ports import WaveSettings
from wavepp.runtime.mechanisms.token_charge import TokenCharge
from wavepp.runtime.planner import MpuBudget, MpuPlanner, Planner, StaticPlanner
from wavepp.runtime.registry import Registry


class Chunking(Protocol):
    @property
    def name(self) -> str: ...

    def planner(self, knobs: WaveSettings, num_stages: int, block_size: int, ring: int,
                charge: TokenCharge) -> Planner:
        ...


CHUNKING = Registry[Chunking]("chunking", doc="the wave budget and how chunks fill it")


@CHUNKING.register
@dataclass(frozen=True, slots=True)
class Mpu:
    """WavePP's MPU wave budget (DESIGN §2: M, b_min, target S = R + (F-1)·P, hysteresis) with
    FCFS packing that never fills a small leftover with a fragment shorter than max(b_min, b/2)."""

    name: str = "mpu"

    def planner(self, knobs: WaveSettings, num_stages: int, block_size: int, ring: int,
                charge: TokenCharge) -> Planner:
        budget = MpuBudget(knobs.max_wave_tokens, knobs.min_wave_tokens, block_size, ring,
                           knobs.fill_factor, num_stages, knobs.hysteresis)
        return MpuPlanner(budget, knobs.min_wave_tokens, block_size, charge.position)


@CHUNKING.register
@dataclass(frozen=True, slots=True)
class Static:
    """A fixed budget per wave, ``static_chunk_tokens`` (TensorRT-LLM's ``max_num_tokens``,
    default 8192), FCFS context chunking (``_chunk_fcfs``; a truncated chunk rounded down to the
    block unit, any leftover may take a fragment)."""

    name: str = "static"

    def planner(self, knobs: WaveSettings, num_stages: int, block_size: int, ring: int,
                charge: TokenCharge) -> Planner:
        return StaticPlanner(knobs.static_chunk_tokens, block_size, charge.position)
