"""Cache topology: how the stages' KV caches are provided (a mechanism the engines consult).

Each engine builds its stages' caches through the policy's pool, never by hand: today every stage
keeps a cache of its own (the premise of WavePP: residency diverges across stages), sized by its
own memory or - as TensorRT-LLM does - all at the smallest stage's size. A pool that one manager
shares across all stages (vLLM's single KV cache manager) plugs in here too.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from wavepp.runtime.kvcache.stage_cache import StageCache
from wavepp.runtime.kvcache.state_snapshots import StateSpec
from wavepp.runtime.registry import Registry


class CachePool(Protocol):
    @property
    def name(self) -> str: ...

    def sizes(self, capacities: Sequence[int]) -> list[int]:
        """Blocks each stage's cache holds, given what each stage's memory holds."""
        ...

    def caches(self, capacities: Sequence[int], block_size: int,
               states: Sequence[StateSpec | None] | None = None) -> list[StageCache]:
        """The caches of stages 0..P-1 for one run; ``states``: per stage, its recurrent-state layers'
        snapshots (a hybrid model), None for attention only."""
        ...


def _build(sizes: Sequence[int], block_size: int, states: Sequence[StateSpec | None] | None) -> list[StageCache]:
    specs = list(states) if states is not None else [None] * len(sizes)
    return [StageCache(s, n, block_size, spec) for s, (n, spec) in enumerate(zip(sizes, specs, strict=True))]


POOL = Registry[CachePool]("pool", doc="how the stages' KV caches are provided and sized")


@POOL.register
@dataclass(frozen=True, slots=True)
class PerStage:
    """Every stage a cache of its own, as large as its memory allows (the first holds the
    embedding, the last the LM head, layer counts may be uneven: capacities differ)."""

    name: str = "per-stage"

    def sizes(self, capacities: Sequence[int]) -> list[int]:
        return list(capacities)

    def caches(self, capacities: Sequence[int], block_size: int,
               states: Sequence[StateSpec | None] | None = None) -> list[StageCache]:
        return _build(self.sizes(capacities), block_size, states)


@POOL.register
@dataclass(frozen=True, slots=True)
class SmallestEverywhere:
    """Every stage a cache of its own, all as large as the smallest stage's: TensorRT-LLM sizes
    each rank's pool from its own free memory, then ``KVCacheManager.calculate_max_num_blocks``
    (``_torch/pyexecutor/resource_manager.py``) takes ``allreduce(max_tokens, op=MIN)`` over the
    whole world, so every PP rank gets the same token capacity."""

    name: str = "min"

    def sizes(self, capacities: Sequence[int]) -> list[int]:
        return [min(capacities)] * len(capacities)

    def caches(self, capacities: Sequence[int], block_size: int,
               states: Sequence[StateSpec | None] | None = None) -> list[StageCache]:
        return _build(self.sizes(capacities), block_size, states)
