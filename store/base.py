"""The ``Store`` protocol: the shared state of a WavePP deployment.

Implementations: :mod:`store.memory` (embedded default, one process). A Redis implementation
behind the same protocol serves several processes and hosts. Every method is a coroutine so
both look the same to the runtime.

For now the protocol holds the reuse hint index: per stage, a counter per resident block hash
(+1 when the stage attaches the block, -1 when it detaches it).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True, slots=True)
class HintResult:
    """Per stage, the longest resident prefix (in blocks); ``reuse_blocks`` is their minimum."""

    per_stage: tuple[int, ...]
    probes: int                  # membership probes the lookup made (all stages)

    @property
    def reuse_blocks(self) -> int:
        return min(self.per_stage) if self.per_stage else 0


class Store(Protocol):
    async def hint_update(self, stage: int, attached: Sequence[int], detached: Sequence[int]) -> None:
        """Apply one stage's attach (+1) and detach (-1) events, in that order."""
        ...

    async def hint_lookup(
        self, prompts: Sequence[Sequence[int]], stages: Sequence[int]
    ) -> list[HintResult]:
        """For each prompt's block hashes, the longest prefix resident on each of ``stages``."""
        ...

    async def hint_clear(self) -> None:
        """Forget the whole index (before a rebuild from the stages' own trees)."""
        ...

    async def close(self) -> None: ...
