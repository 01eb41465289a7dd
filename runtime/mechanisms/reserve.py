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

    @property
    def held_prefix(self) -> bool:
        """Whether each stage adds to :meth:`blocks` the reused blocks its lease found held by other
        requests (only a stage knows which: its own residency)."""
        ...

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
    held_prefix: bool = False

    def blocks(self, num_tokens: int, reuse_blocks: int, block_size: int) -> int:
        return cdiv(num_tokens - reuse_blocks * block_size, block_size)


@RESERVE.register
@dataclass(frozen=True, slots=True)
class WholePrompt:
    """Room for the whole prompt, reused blocks included: TensorRT-LLM's capacity scheduler before
    PR #11490 counted a request's context blocks, ``ceil(L / B)``, without subtracting what it would
    reuse, against the pool's free blocks.

    "Cached blocks without active references are already counted as free by the eviction policy"
    (PR #11731's description), so for those the whole count is right: reusing one takes it from the
    free pool as a new block would. Here a lease pins them, which already takes them from what
    escrow may claim; so this reserve asks for the suffix (:meth:`blocks`) plus the reused blocks
    that other running requests already held (``held_prefix``): in use, so not free, yet counted in
    the need - the old scheduler's double count. Counting a request's own newly pinned prefix twice
    instead would refuse, forever, a prompt that reuses more than the pool's spare room: a stall
    the source does not have."""

    name: str = "whole-prompt"
    held_prefix: bool = True

    def blocks(self, num_tokens: int, reuse_blocks: int, block_size: int) -> int:
        return cdiv(num_tokens - reuse_blocks * block_size, block_size)
