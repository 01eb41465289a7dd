"""The policy interface: which mechanisms a run uses. The loop reads these and nothing else.

A baseline differs from ``wavepp`` only in the mechanisms its docstring names.
"""

from __future__ import annotations

from runtime.knobs import Knobs
from runtime.planner import MpuBudget, MpuPlanner, Planner, StaticPlanner


class Policy:
    name: str = ""
    #: admission rounds run in their own task, beside the pipeline loop (else inside it)
    async_admission: bool = True
    #: the reuse boundary comes from the shared hint index over all stages (else stage 0's tree)
    use_hint_index: bool = True
    #: admission leases and escrows on every stage (else on stage 0 only; the other stages
    #: admit locally when the request's first chunk reaches them, and fall back late)
    lease_all_stages: bool = True
    #: new requests' token ids are relayed stage to stage before the stages can run them
    broadcast_requests: bool = False
    #: default ring size R = ring_factor * P (knob ``ring`` overrides)
    ring_factor: int = 2
    #: a wave smaller than b_min waits for more admitted work while P waves are in flight
    fill_waves: bool = True
    #: the planner when the ``planner`` knob says "auto"
    default_planner: str = "mpu"

    def ring_size(self, knobs: Knobs, num_stages: int) -> int:
        return knobs.ring_size(num_stages, self.ring_factor)

    def make_planner(self, knobs: Knobs, num_stages: int, block_size: int) -> Planner:
        kind = self.default_planner if knobs.planner == "auto" else knobs.planner
        if kind == "static":
            return StaticPlanner(knobs.static_chunk_tokens, block_size)
        ring = self.ring_size(knobs, num_stages)
        budget = MpuBudget(knobs.max_wave_tokens, knobs.min_wave_tokens, block_size, ring,
                           knobs.fill_factor, num_stages, knobs.hysteresis)
        return MpuPlanner(budget, knobs.min_wave_tokens, block_size)


class StaticChunkPolicy(Policy):
    """Shared by baselines that cut waves of a fixed ``static_chunk_tokens``."""

    default_planner = "static"
