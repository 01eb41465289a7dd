"""What an engine supplies to the shared loop: stage handles and a stage executor.

The admission, planning and loop code never knows which engine (or clock) it runs on. It
talks to each stage through a :class:`~runtime.kvcache.handle.StageHandle` (cache operations, batched one
message per stage per round) and runs waves through a :class:`StageExecutor`. Time is the running event
loop's clock (:func:`runtime.clock.now`): virtual on the sim engine, monotonic on real ones.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from wavepp.runtime.kvcache.handle import StageHandle
from wavepp.runtime.planning.step_times import StageFit, StepModel
from wavepp.runtime.request import Chunk, Wave
from wavepp.store.base import Store


class StageExecutor(Protocol):
    """Runs the compute of one wave on one stage and moves activations to the next."""

    num_stages: int
    max_context: int             # longest prompt the model takes; longer ones fail with a clear error

    async def execute(self, stage: int, wave_id: int, chunks: Sequence[Chunk],
                      tables: dict[str, list[int]]) -> None:
        """Run wave ``wave_id``'s live ``chunks`` on ``stage``; ``tables`` maps each request to its block table."""
        ...

    async def transfer(self, stage: int, wave: Wave) -> None:
        """Send the wave's activations from ``stage`` to ``stage + 1``."""
        ...

    def step_prior(self) -> list[StageFit] | None:
        """Fits of each stage's ``t(L, x)`` from what the engine knows (the sim's cost model), or None:
        the loop then learns them from the steps it runs (:mod:`runtime.planning.step_times`)."""
        ...

    def step_model(self) -> StepModel | None:
        """The engine's own price of a step, ``(stage, [(context, new tokens)]) -> seconds``, where it has
        one (the sim: its cost model), or None: the planners then predict with the fits."""
        ...

    def first_token(self, request_id: str) -> int | None:
        """The first token of a completed request (None when the engine computes no logits)."""
        ...

    def forget(self, request_id: str) -> None:
        """A request is done or failed: drop what the engine keeps for it."""
        ...


@dataclass(slots=True)
class EngineParts:
    """What one run gets from an engine: fresh caches behind handles, an executor, a store."""

    handles: list[StageHandle]
    executor: StageExecutor
    store: Store
    block_size: int
