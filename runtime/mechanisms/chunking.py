"""Chunking: the wave budget and how chunks fill it (the planner a policy runs with).

The ``planner`` knob can override a policy's own choice (``auto`` keeps it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from wavepp.runtime.knobs import Knobs
from wavepp.runtime.mechanisms.token_charge import TokenCharge
from wavepp.runtime.planner import MpuBudget, MpuPlanner, Planner, StaticPlanner


class Chunking(Protocol):
    @property
    def name(self) -> str: ...

    def planner(self, knobs: Knobs, num_stages: int, block_size: int, ring: int, charge: TokenCharge) -> Planner:
        ...


@dataclass(frozen=True, slots=True)
class Mpu:
    """WavePP's MPU wave budget (DESIGN §2: M, b_min, target S = R + (F-1)·P, hysteresis) with
    FCFS packing that never fills a small leftover with a fragment shorter than max(b_min, b/2)."""

    name: str = "mpu"

    def planner(self, knobs: Knobs, num_stages: int, block_size: int, ring: int, charge: TokenCharge) -> Planner:
        budget = MpuBudget(knobs.max_wave_tokens, knobs.min_wave_tokens, block_size, ring,
                           knobs.fill_factor, num_stages, knobs.hysteresis)
        return MpuPlanner(budget, knobs.min_wave_tokens, block_size, charge.position)


@dataclass(frozen=True, slots=True)
class Static:
    """A fixed budget per wave, ``static_chunk_tokens`` (TensorRT-LLM's ``max_num_tokens``,
    default 8192), FCFS context chunking (``_chunk_fcfs``; a truncated chunk rounded down to the
    block unit, any leftover may take a fragment)."""

    name: str = "static"

    def planner(self, knobs: Knobs, num_stages: int, block_size: int, ring: int, charge: TokenCharge) -> Planner:
        return StaticPlanner(knobs.static_chunk_tokens, block_size, charge.position)


CHUNKINGS: dict[str, Chunking] = {c.name: c for c in (Mpu(), Static())}
