"""The sim engine's stage executor: a wave takes the cost model's time on the virtual clock."""

from __future__ import annotations

import zlib
from array import array
from collections.abc import Sequence

from wavepp.runtime.clock import sleep
from wavepp.runtime.engines.request_book import RequestBook
from wavepp.runtime.engines.sim.costmodel import ChunkShape, CostModel
from wavepp.runtime.planning.step_times import StageFit, StepModel, fit_waves
from wavepp.runtime.request import Chunk, Wave


class StageFailed(RuntimeError):
    """A simulated stage died (:meth:`SimExecutor.fail_stage`): the sim's counterpart of the torch
    engine's ``StageDied``."""


# Distinct wave shapes whose modelled step times (every stage's) are remembered (a planner prices the same
# waves again and again as its window slides; each stage's execute of a planned wave prices it once more).
STEP_MEMO = 1 << 16


class SimExecutor(RequestBook):
    def __init__(self, cost_model: CostModel, time_scale: float = 1.0, max_context: int = 1 << 30,
                 step_fit: Sequence[tuple[float, float]] | None = None) -> None:
        super().__init__()
        self.cost_model = cost_model
        self.max_context = max_context
        self.num_stages = cost_model.num_stages
        self.time_scale = time_scale          # real-time mode: stretch (>1) or shrink (<1) modelled times
        self.step_fit = step_fit              # per stage (scale, offset s): a what-if replay's fit to a run's steps
        self.failed: dict[int, str] = {}      # stage -> why: its next step raises StageFailed (fail_stage)
        self._steps: dict[tuple[tuple[int, int], ...], list[float]] = {}   # chunks -> each stage's model s

    def fail_stage(self, stage: int, why: str) -> None:
        """From now on ``stage``'s steps and sends raise :class:`StageFailed` - a stage process dying
        mid-run, for the tests that make stages fail at any point."""
        self.failed[stage] = why

    def _check(self, stage: int) -> None:
        if stage in self.failed:
            raise StageFailed(self.failed[stage])

    def step_seconds(self, stage: int, chunks: Sequence[tuple[int, int]]) -> float:
        """What a step of (context, new tokens) ``chunks`` takes on ``stage``: the cost model's time,
        stretched as the run's clock stretches it."""
        scale, offset = self.step_fit[stage] if self.step_fit else (1.0, 0.0)
        key = tuple(chunks)
        model = self._steps.get(key)
        if model is None:                   # the cost model is a pure function of the shapes
            if len(self._steps) >= STEP_MEMO:
                self._steps.clear()
            model = self._steps[key] = self.cost_model.step_times([ChunkShape(L, x) for L, x in chunks])
        return model[stage] * self.time_scale * scale + offset

    async def execute(self, stage: int, wave_id: int, chunks: Sequence[Chunk],
                      tables: dict[str, list[int]]) -> None:
        self._check(stage)
        step = self.step_seconds(stage, [(c.start, c.length) for c in chunks])
        finishing = [c for c in chunks if c.is_last and c.tokens] if stage == self.num_stages - 1 else []
        if not finishing:                  # nothing kept from this step: no request to watch while it runs
            await sleep(step)
            return
        with self.running(finishing):
            await sleep(step)
            for c in finishing:
                self.keep_first(c.request_id, sim_first_token(c.tokens))    # type: ignore[arg-type]

    async def transfer(self, stage: int, wave: Wave) -> None:
        self._check(stage)
        await sleep(self.cost_model.transfer_time(stage, wave.num_tokens) * self.time_scale)

    def step_prior(self) -> list[StageFit]:
        """Each stage's ``t(L, x)`` fitted to the cost model over the shapes a run meets: waves of 1-4
        chunks, 256 to 16K new tokens after up to 128K of context (within the model's context)."""
        grid = [(L, x, n) for L in (0, 2048, 8192, 32768, 131072) for x in (256, 1024, 2048, 4096, 8192, 16384)
                for n in (1, 2, 4) if L + x <= self.max_context and n * x <= 32768]
        return [fit_waves([(L, x, n, self.cost_model.step_time(s, [ChunkShape(L, x)] * n)) for L, x, n in grid])
                for s in range(self.num_stages)]

    def step_model(self) -> StepModel:
        """The planner prices a wave as this executor will charge it (the kernel tables)."""
        return self.step_seconds


def sim_first_token(tokens: array[int]) -> int:
    """The simulator's first token (it has no logits): one of the prompt's own tokens, picked by a
    CRC-32 of the whole prompt - the same prompt always gets the same token, and the token is one the
    client's tokenizer made, so it decodes to text a client counts as content (a token id drawn from
    the whole vocabulary would often be one no text encodes to)."""
    return tokens[zlib.crc32(tokens.tobytes()) % len(tokens)]
