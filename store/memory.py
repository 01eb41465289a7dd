"""The embedded store: the hint index as per-stage dicts in this process."""

from __future__ import annotations

from collections.abc import Sequence

from store.base import HintResult
from store.probe import longest_prefix


class MemoryStore:
    """In-process :class:`store.base.Store`. Not shared between processes."""

    def __init__(self) -> None:
        self._counts: dict[int, dict[int, int]] = {}

    def _stage(self, stage: int) -> dict[int, int]:
        return self._counts.setdefault(stage, {})

    async def hint_update(self, stage: int, attached: Sequence[int], detached: Sequence[int]) -> None:
        # A stage publishes its events in order (StageHandle.publish serializes), so a count
        # never needs to go below zero: a detach of an unknown hash is ignored.
        counts = self._stage(stage)
        for h in attached:
            counts[h] = counts.get(h, 0) + 1
        for h in detached:
            n = counts.get(h, 0) - 1
            if n > 0:
                counts[h] = n
            else:
                counts.pop(h, None)

    async def hint_lookup(
        self, prompts: Sequence[Sequence[int]], stages: Sequence[int]
    ) -> list[HintResult]:
        out = []
        for hashes in prompts:
            probes = 0
            per_stage = []
            for s in stages:
                counts = self._stage(s)

                def resident(h: int, counts: dict[int, int] = counts) -> bool:
                    nonlocal probes
                    probes += 1
                    return h in counts

                per_stage.append(longest_prefix(hashes, resident))
            out.append(HintResult(tuple(per_stage), probes))
        return out

    async def hint_clear(self) -> None:
        self._counts.clear()

    async def close(self) -> None:
        return None

    def resident_count(self, stage: int) -> int:
        """Hashes the index believes resident on ``stage`` (tests compare it with the stage)."""
        return len(self._stage(stage))
