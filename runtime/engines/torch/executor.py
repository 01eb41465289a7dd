"""The torch engine's stage executor: real compute, one worker thread per stage.

Each stage's forward runs off the asyncio loop in its own single-thread pool (PyTorch releases
the GIL inside its kernels, so stages overlap like a pipeline). Activations of a chunk stay on the
executor between stages, keyed by (stage, request, attempt, start), so a chunk dropped at a later stage
(failure, late fallback) never shifts another chunk's rows. The last stage keeps each finished
request's first token (argmax of its last position's logits).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

import torch
from torch import Tensor

from wavepp.runtime.engines.request_book import RequestBook
from wavepp.runtime.engines.torch.model import ChunkSpec, StageModel
from wavepp.runtime.request import Chunk, Wave


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
            inputs = torch.tensor(stage0_tokens(chunks), dtype=torch.long, device=self.device)
        else:
            inputs = torch.cat([self._acts.pop((stage - 1, c.request_id, c.attempt, c.start)) for c in chunks])
        loop = asyncio.get_running_loop()
        with self.running(chunks):
            out = await loop.run_in_executor(self._pools[stage], self._forward, stage, inputs, specs)
            if stage == self.num_stages - 1:
                best = out.argmax(dim=-1).tolist()          # (num_chunks,)
                for i, (c, token) in enumerate(zip(chunks, best, strict=True)):
                    if c.is_last:
                        self.keep_first(c.request_id, int(token), out[i].float().cpu() if self.keep_logits else None)
            else:
                row = 0
                for c in chunks:
                    if self.live(c.request_id):     # a request forgotten while this ran: its rows are dropped
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


def stage0_tokens(chunks: Sequence[Chunk]) -> list[int]:
    """Stage 0's input: each chunk's tokens, read from the prompt its chunk carries."""
    ids: list[int] = []
    for c in chunks:
        if c.tokens is None:
            raise ValueError(f"chunk of {c.request_id} reached stage 0 without its tokens")
        ids.extend(c.tokens[c.start:c.start + c.length])
    return ids
