"""Reserve: how much KV capacity a stage sets aside (escrows) for an admitted request.

Reserving more than a request will write is safe - the unused part goes back when it completes
- but it admits fewer requests once the pool binds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from wavepp.runtime.registry import Registry
from wavepp.runtime.request import cdiv


class Reserve(Protocol):
    @property
    def name(self) -> str: ...

    def blocks(self, num_tokens: int, reuse_blocks: int, block_size: int) -> int:
        """Blocks to escrow for a prompt of ``num_tokens`` reusing ``reuse_blocks`` blocks."""
        ...


RESERVE = Registry[Reserve]("reserve", doc="KV blocks escrowed per admitted request")


@RESERVE.register
@dataclass(frozen=True, slots=True)
class SuffixBlocks:
    """Room for the uncached suffix only, ``ceil((L - k·B) / B)`` (DESIGN §2). TensorRT-LLM
    subtracts reusable blocks from the reservation since PR #11490 (refined by #11731, only
    blocks already allocated to running requests are double-count free; ``fit_token_budget``
    #15187)."""

    name: str = "suffix"

    def blocks(self, num_tokens: int, reuse_blocks: int, block_size: int) -> int:
        return cdiv(num_tokens - reuse_blocks * block_size, block_size)


@RESERVE.register
@dataclass(frozen=True, slots=True)
class WholePrompt:
    """Room for the whole prompt, ``ceil(L / B)``, reused blocks included: TensorRT-LLM's
    capacity scheduler before PR #11490 counted a request's context blocks without subtracting
    what it would reuse."""

    name: str = "whole-prompt"

    def blocks(self, num_tokens: int, reuse_blocks: int, block_size: int) -> int:
        return cdiv(num_tokens, block_size)
