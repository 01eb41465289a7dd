"""Reuse lookup: where an admission round finds each request's reuse boundary ``k``.

The round then leases ``[0, k)`` on the stages that admit (see ``stage_admission``); a stage
that cannot give ``k`` answers less and the boundary only goes down (DESIGN §2).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from wavepp.runtime.kvcache.handle import StageHandle
from wavepp.runtime.registry import Registry
from wavepp.store.base import Store


class ReuseLookup(Protocol):
    @property
    def name(self) -> str: ...

    async def boundaries(self, prompts: Sequence[list[int]], limits: Sequence[int], store: Store,
                         stages: Sequence[StageHandle]) -> tuple[list[int], int]:
        """Per prompt the candidate boundary (in blocks, at most its limit), and the probes it took."""
        ...


LOOKUP = Registry[ReuseLookup]("lookup", doc="where a round finds the reuse boundary")


@LOOKUP.register
@dataclass(frozen=True, slots=True)
class HintIndex:
    """WavePP: the minimum over *all* stages of the longest resident prefix, from the shared
    hint index (one store call per round; exponential probe + binary search per stage)."""

    name: str = "hint-index"

    async def boundaries(self, prompts: Sequence[list[int]], limits: Sequence[int], store: Store,
                         stages: Sequence[StageHandle]) -> tuple[list[int], int]:
        results = await store.hint_lookup(prompts, range(len(stages)))
        return ([min(r.reuse_blocks, lim) for r, lim in zip(results, limits, strict=True)],
                sum(r.probes for r in results))


@LOOKUP.register
@dataclass(frozen=True, slots=True)
class FirstStageTree:
    """A conventional PP loop: the first rank matches the prefix in its own KV cache manager
    alone (TensorRT-LLM: ``KVCacheManager.add_sequence`` -> ``loadOrAllocateBlocks`` on each rank,
    nothing reconciles ranks - ``resource_manager.py``); the other stages find out later."""

    name: str = "first-stage"

    async def boundaries(self, prompts: Sequence[list[int]], limits: Sequence[int], store: Store,
                         stages: Sequence[StageHandle]) -> tuple[list[int], int]:
        return await stages[0].lookup_local(prompts, limits), 0
