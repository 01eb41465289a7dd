"""Block publication: when the blocks a request computes become reusable by other requests - when it
completes, or as soon as the wave carrying each chunk has retired (run on every stage), while the request
still runs.

A long document that several requests share is where this decides the figures: with publication at
completion, a request arriving while the document is computed finds none of it and computes it again.
TensorRT-LLM stores a context request's blocks for every executed micro-batch since PR #6683 (Aug 2025):
``resource_manager.py`` ``KVCacheManager.update_resources`` calls ``store_context_blocks`` for the context
requests of the batch it just handled; before it, blocks were stored when the context completed
(``trtllm-pp-legacy``). vLLM and SGLang publish earlier still - when a chunk is scheduled, before its
forward (vLLM ``KVCacheManager.allocate_slots`` -> ``cache_blocks``; SGLang ``cache_unfinished_req`` at the
start of the next round): publication on retire is the nearest this runtime models for them, up to P-1
waves later than their sources (a request looked up in between misses the chunks still in flight).

Only full blocks of executed chunks are stored, on every stage at once (the wave has run on each); a block
another request cached first stays that request's, and the rest of ours wait for completion (which adopts
it, as it always did). A hybrid model's stages store at completion (a resumable state is kept only there).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from wavepp.runtime.registry import Registry


class BlockPublication(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def on_retire(self) -> bool:
        """Whether a running request's executed full blocks are stored when their wave retires."""
        ...


PUBLISH = Registry[BlockPublication]("publish", doc="when a request's computed blocks become reusable")


@PUBLISH.register
@dataclass(frozen=True, slots=True)
class AtCompletion:
    """Reusable once the request completes (WavePP; TensorRT-LLM before PR #6683)."""

    name: str = "completion"

    @property
    def on_retire(self) -> bool:
        return False


@PUBLISH.register
@dataclass(frozen=True, slots=True)
class AtRetire:
    """Reusable chunk by chunk, once each chunk's wave retired (TensorRT-LLM since PR #6683)."""

    name: str = "retire"

    @property
    def on_retire(self) -> bool:
        return True
