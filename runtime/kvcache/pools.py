"""Cache topology: how the stages' KV caches are provided (a mechanism the engines consult).

Each engine builds its stages' caches through the policy's pool, never by hand: every stage keeps a
cache of its own (the premise of WavePP: residency diverges across stages), sized by its own memory
or - as TensorRT-LLM does - all at the smallest stage's size; or one manager decides for all stages
(:class:`CentralManager`: vLLM's single KV cache manager, SGLang's replicated per-rank trees).
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


@POOL.register
@dataclass(frozen=True, slots=True)
class CentralManager:
    """One cache manager decides every stage's blocks, at the smallest stage's size: a hit holds on
    every stage by construction, and no stage evicts on its own.

    vLLM v1: one ``Scheduler`` with one ``KVCacheManager`` for all PP ranks (``v1/core/sched/scheduler.py``),
    every worker applying the same block ids to its own layers; ``get_kv_cache_configs``
    (``v1/core/kv_cache_utils.py``) sets every worker's ``num_blocks`` to the smallest among them. SGLang: a
    radix tree and a pool per rank, but since PR #10214 every rank's ``max_total_num_tokens`` is the
    all-reduced minimum and every rank runs the same scheduling decisions in lockstep on the same requests
    (``scheduler_pp_mixin.py``) - replicas of one manager's state. A hybrid model's states take the largest
    stage's slot in every stage (vLLM sizes one page to fit every layer group's state)."""

    name: str = "central"

    def sizes(self, capacities: Sequence[int]) -> list[int]:
        return [min(capacities)] * len(capacities)

    def caches(self, capacities: Sequence[int], block_size: int,
               states: Sequence[StateSpec | None] | None = None) -> list[StageCache]:
        specs = [s for s in (states or ()) if s is not None]
        spec = StateSpec(max(s.slot_blocks for s in specs), specs[0].interval_blocks) if specs else None
        central = StageCache(0, min(capacities), block_size, spec)
        return [central, *(MirrorCache(s, central) for s in range(1, len(capacities)))]


class MirrorCache(StageCache):
    """A stage whose blocks a central manager (stage 0's cache) decides: it takes no lease, escrow or block of
    its own and hands back the manager's block table for a request (the ids every worker uses). A policy that
    admits on more stages than the manager (a policy switched to at run time) finds each mirror agreeing:
    whatever the manager granted and set aside holds here too."""

    mirrored = True

    def __init__(self, stage: int, central: StageCache) -> None:
        super().__init__(stage, central.pool.num_blocks, central.block_size)   # an unused pool: built lazily
        self.central = central
        self.states = central.states

    def prefix_length(self, hashes: list[int], limit: int | None = None) -> int:
        return self.central.prefix_length(hashes, limit)

    def lease(self, rid: str, hashes: list[int], k: int, num_tokens: int, follow: tuple[str, int] | None = None) -> int:
        return k if follow is None else follow[1]

    def shrink_lease(self, rid: str, k: int) -> int:
        return k

    def can_escrow(self, num_blocks: int, rid: str | None = None) -> bool:
        return True

    def escrow(self, rid: str, num_blocks: int) -> None:
        return None

    def escrow_round(self, items: list[tuple[str, int]], held_prefix: bool = False) -> int:
        return len(items)

    def materialize(self, rid: str, start: int, length: int, reuse_blocks: int) -> list[int]:
        table = self.tables[rid] = list(self.central.tables.get(rid, ()))
        return table

    def store(self, rid: str, hashes: list[int], upto: int) -> int:
        return 0

    def complete(self, rid: str, hashes: list[int]) -> None:
        self.tables.pop(rid, None)

    def release(self, rid: str) -> bool:
        return self.tables.pop(rid, None) is not None

    def check(self) -> None:
        assert not self.leases and not self.tickets, "a mirror holds nothing of its own"

