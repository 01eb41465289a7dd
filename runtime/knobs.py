"""Scheduling knobs: one typed, validated record the runtime reads at every wave boundary."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, fields
from typing import Any


class KnobError(ValueError):
    """A knob value is of the wrong type, out of range, or inconsistent with another knob."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


@dataclass(frozen=True, slots=True)
class Knobs:
    """Defaults are the published WavePP settings (DESIGN §2: M = 16384, b_min = 8192, R = 2P, F = 2)."""

    max_wave_tokens: int = 16384        # M: the largest wave budget MPU may choose
    min_wave_tokens: int = 8192         # b_min: the smallest
    ring: int = 0                       # R: waves in flight; 0 = 2P (wavepp) or P (baselines)
    fill_factor: int = 2                # F: target ready waves S = R + (F-1)·P
    hysteresis: bool = True             # raise after R/2 agreeing decisions, lower after P
    max_leases: int = 1024              # concurrent leases (admitted, unfinished requests)
    max_round_requests: int = 64        # requests one admission round may batch
    static_chunk_tokens: int = 8192     # baselines' max_num_tokens (TensorRT-LLM default 8192)
    policy: str = "wavepp"              # which mechanisms run (runtime.policies); switches at a wave boundary
    planner: str = "auto"               # auto (the policy's own) | mpu | static

    def ring_size(self, num_stages: int, default_factor: int) -> int:
        return self.ring if self.ring > 0 else default_factor * num_stages

    def replace(self, **changes: Any) -> Knobs:
        return validate(dataclasses.replace(self, **changes))

    def as_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


POLICY_NAMES = ("wavepp", "trtllm-pp")
PLANNERS = ("auto", "mpu", "static")
_CHOICES: dict[str, tuple[str, ...]] = {"policy": POLICY_NAMES, "planner": PLANNERS}

# Wave budgets for CPU-sized prompts (the torch engine on a CPU, and the sim calibrated on it): the
# published M = 16384 / b_min = 8192 would put every admitted request of a few hundred tokens into
# one wave and leave stages idle. The baseline's static chunk keeps its ratio to b_min.
CPU_KNOBS = Knobs(max_wave_tokens=1024, min_wave_tokens=512, static_chunk_tokens=512)

_RANGES: dict[str, tuple[int, int]] = {
    "max_wave_tokens": (16, 1 << 22),
    "min_wave_tokens": (16, 1 << 22),
    "ring": (0, 4096),
    "fill_factor": (1, 64),
    "max_leases": (1, 1 << 20),
    "max_round_requests": (1, 1 << 16),
    "static_chunk_tokens": (16, 1 << 22),
}


def check_block_size(knobs: Knobs, block_size: int) -> Knobs:
    """Token budgets are whole blocks: a wave never splits a KV block between two chunks."""
    for name in ("max_wave_tokens", "min_wave_tokens", "static_chunk_tokens"):
        value = getattr(knobs, name)
        if value % block_size:
            raise KnobError(name, f"{value} is not a multiple of the block size {block_size}")
    return knobs


def validate(knobs: Knobs) -> Knobs:
    """Return ``knobs`` if every field is well typed, in range and consistent; else raise KnobError."""
    for f in fields(knobs):
        value = getattr(knobs, f.name)
        if f.name in _CHOICES:
            if value not in _CHOICES[f.name]:
                raise KnobError(f.name, f"{value!r} is not one of {', '.join(_CHOICES[f.name])}")
            continue
        if f.type in ("bool", bool):
            if not isinstance(value, bool):
                raise KnobError(f.name, f"expected true/false, got {value!r}")
            continue
        if isinstance(value, bool) or not isinstance(value, int):
            raise KnobError(f.name, f"expected an integer, got {value!r}")
        lo, hi = _RANGES[f.name]
        if not lo <= value <= hi:
            raise KnobError(f.name, f"{value} is out of range [{lo}, {hi}]")
    if knobs.min_wave_tokens > knobs.max_wave_tokens:
        raise KnobError("min_wave_tokens", f"b_min {knobs.min_wave_tokens} > M {knobs.max_wave_tokens}")
    return knobs


def from_changes(base: Knobs, changes: dict[str, Any]) -> Knobs:
    """``base`` with ``changes`` (e.g. decoded JSON or form input) applied and validated.

    Unknown names, wrong types, out-of-range values and inconsistent pairs raise KnobError
    naming the field; nothing is partially applied.
    """
    names = {f.name for f in fields(Knobs)}
    for name in changes:
        if name not in names:
            raise KnobError(name, f"unknown knob (known: {', '.join(sorted(names))})")
    return validate(dataclasses.replace(base, **changes))


def from_dict(values: dict[str, Any]) -> Knobs:
    """A full record (unknown keys are an error; missing ones take the defaults)."""
    return from_changes(Knobs(), values)
