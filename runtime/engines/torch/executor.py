"""The torch engine's stage executor: real compute, one worker thread per stage.

Each stage's forward runs off the asyncio loop in its own single-thread pool (PyTorch releases
the GIL inside its kernels, so stages overlap like a pipeline). Activations of a chunk stay on the
executor between stages, keyed by (stage, request, attempt, start), so a chunk dropped at a later stage
(failure, late fallback) never shifts another chunk's rows. The last stage keeps each finished
request's first token (argmax of its last position's logits).
"""

from __future__ import annotations

import asyncio
from array import array
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

import torch
from torch import Tensor

from wavepp.runtime.engines.torch.model import ChunkSpec, StageModel
from wavepp.runtime.planning.step_times import StageFit, StepModel
from wavepp.runtime.request import Chunk, Request, Wave


class RequestBook:
    """What an executor keeps per request between the loop's calls: its tokens (stage 0's input),
    its first token and, with ``keep_logits`` (the exactness check), its last-position logits."""

    def __init__(self, keep_logits: bool = False) -> None:
        self.keep_logits = keep_logits
        self._tokens: dict[str, array[int]] = {}
        self._first: dict[str, int] = {}
        self._logits: dict[str, Tensor] = {}

    def register(self, request: Request) -> None:
        self._tokens[request.id] = request.tokens

    def forget(self, request_id: str) -> None:
        self._tokens.pop(request_id, None)
        self._first.pop(request_id, None)
        self._logits.pop(request_id, None)

    def first_token(self, request_id: str) -> int | None:
        return self._first.get(request_id)

    def step_prior(self) -> list[StageFit] | None:
        """A real engine knows its step times only by running them: the loop fits them online."""
        return None

    def step_model(self) -> StepModel | None:
        return None

    def logits(self, request_id: str) -> Tensor | None:
        """Last-position logits of a finished request (with ``keep_logits``: the exactness check)."""
        return self._logits.get(request_id)

    def clear(self) -> None:
        for d in (self._tokens, self._first, self._logits):
            d.clear()


class TorchExecutor(RequestBook):
    def __init__(self, stages: Sequence[StageModel], max_context: int, keep_logits: bool = False) -> None:
        super().__init__(keep_logits)
        self.stages = list(stages)
        self.max_context = max_context
        self.num_stages = len(self.stages)
        self.device = next(iter(self.stages[0].parameters())).device if list(self.stages[0].parameters()) \
            else torch.device("cpu")
        self._pools = [ThreadPoolExecutor(1, thread_name_prefix=f"stage{s}") for s in range(self.num_stages)]
        self._acts: dict[tuple[int, str, int, int], Tensor] = {}

    def forget(self, request_id: str) -> None:
        super().forget(request_id)
        for key in [k for k in self._acts if k[1] == request_id]:
            del self._acts[key]

    def gather_kv(self, stage: int, layer: int, table: list[int], num_tokens: int) -> tuple[Tensor, Tensor]:
        k, v = self.stages[stage].gather_kv(layer, table, num_tokens)
        return k.float().cpu(), v.float().cpu()

    # ---- compute -------------------------------------------------------------------------------
    async def execute(self, stage: int, wave_id: int, chunks: Sequence[Chunk],
                      tables: dict[str, list[int]]) -> None:
        specs = [ChunkSpec(c.start, c.length, tuple(tables[c.request_id])) for c in chunks]
        if stage == 0:
            ids = [t for c in chunks for t in self._tokens[c.request_id][c.start:c.start + c.length]]
            inputs = torch.tensor(ids, dtype=torch.long, device=self.device)
        else:
            inputs = torch.cat([self._acts.pop((stage - 1, c.request_id, c.attempt, c.start)) for c in chunks])
        loop = asyncio.get_running_loop()
        out = await loop.run_in_executor(self._pools[stage], self._forward, stage, inputs, specs)
        if stage == self.num_stages - 1:
            best = out.argmax(dim=-1).tolist()          # (num_chunks,)
            for i, (c, token) in enumerate(zip(chunks, best, strict=True)):
                if c.is_last and c.request_id in self._tokens:     # not forgotten (failed, cancelled) meanwhile
                    self._first[c.request_id] = int(token)
                    if self.keep_logits:
                        self._logits[c.request_id] = out[i].float().cpu()
        else:
            row = 0
            for c in chunks:
                if c.request_id in self._tokens:     # a request forgotten while this ran: its rows are dropped
                    self._acts[(stage, c.request_id, c.attempt, c.start)] = out[row:row + c.length]
                row += c.length

    def _forward(self, stage: int, inputs: Tensor, specs: list[ChunkSpec]) -> Tensor:
        with torch.inference_mode():
            return self.stages[stage].forward_wave(inputs, specs)

    async def transfer(self, stage: int, wave: Wave) -> None:
        """Threads of one process share memory: the activations are already where stage+1 reads them."""
        return None

    def close(self) -> None:
        for pool in self._pools:
            pool.shutdown(wait=False, cancel_futures=True)
