"""The ``torch`` engine: the decoder's stages run for real.

``launcher="threads"`` (default): every stage is a thread of this process. ``"spawn"`` /
``"torchrun"``: stage s is rank s of a ``torch.distributed`` world (gloo on CPU, NCCL for
activations on CUDA); this process is rank 0, the leader, and runs stage 0 itself
(``runtime.engines.torch.processes``).

Each stage's KV pool holds as many blocks as its memory budget allows; the stage's cache
(``runtime.kvcache``) hands out the same block ids the pool is indexed by. Intra-op threads are
split between the stages so they do not oversubscribe the cores.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import torch

from wavepp.runtime.control.knobs import CPU_KNOBS, Knobs
from wavepp.runtime.engines.base import EngineParts
from wavepp.runtime.engines.common import open_run_store, run_telemetry
from wavepp.runtime.engines.config import TorchConfig
from wavepp.runtime.engines.coordination import DEFAULT_COSTS
from wavepp.runtime.engines.torch.config import DecoderConfig, load_config
from wavepp.runtime.engines.torch.executor import TorchExecutor
from wavepp.runtime.engines.torch.model import build_stages, default_device_dtype, split_layers
from wavepp.runtime.engines.torch.processes.launch import threads_per_process
from wavepp.runtime.engines.torch.processes.leader import ProcessExecutor, RemoteStageHandle, start_processes
from wavepp.runtime.engines.torch.processes.stage_server import StageSpec
from wavepp.runtime.engines.torch.weights import load_hf_dir, random_weights
from wavepp.runtime.kvcache.handle import StageHandle
from wavepp.runtime.kvcache.pools import CachePool, PerStage
from wavepp.runtime.runs.runfile import RunInfo
from wavepp.store.base import Store
from wavepp.store.memory import MemoryStore
from wavepp.store.urls import parse_store_url
from wavepp.telemetry.setup import Telemetry

PER_STAGE = PerStage()


class TorchEngine:
    name = "torch"

    def __init__(self, config: TorchConfig) -> None:
        self.config = config
        model, pp, block_size = config.model, config.pp, config.block_size
        # What a what-if replays a run of this engine with: its calibration (None without one: a replay is
        # refused, saying how to make one). A run's meta carries it (runtime.runs.meta).
        self.replay_args = {"cost_profile": config.sim_profile} if config.sim_profile else None
        self.cfg: DecoderConfig = load_config(model)
        if pp > self.cfg.num_layers:
            raise ValueError(f"pp must be between 1 and the model's {self.cfg.num_layers} layers, got {pp}")
        self.model_name = model
        self.pp = pp
        self.block_size = block_size
        self.seed = seed = config.seed
        self.store_url = parse_store_url(config.store_url)
        dev, dtype = default_device_dtype()
        self.device = torch.device(config.device) if config.device else dev
        self.dtype = dtype if self.device.type == "cuda" else torch.float32
        path = Path(model)
        self.hf_dir = str(path) if path.is_dir() else None
        layers = split_layers(self.cfg.num_layers, pp)
        if config.kv_blocks:
            blocks = list(config.kv_blocks)
        else:
            elem = torch.tensor([], dtype=self.dtype).element_size()
            per_block = [2 * len(r) * block_size * self.cfg.num_kv_heads * self.cfg.head_dim * elem for r in layers]
            blocks = [max(1, int(config.kv_memory_mb * 2**20 // b)) for b in per_block]
        launcher = config.launcher
        self.capacities = blocks
        self.launcher = launcher
        if self.device.type == "cpu":
            # One intra-op pool is shared by every stage thread (or process): split the cores between stages.
            torch.set_num_threads(threads_per_process(pp))
        self._procs: ProcessExecutor | None = None
        if launcher == "threads":
            self.weights = load_hf_dir(path, self.cfg) if self.hf_dir else random_weights(self.cfg, seed)
            return
        dtype_name = str(self.dtype).removeprefix("torch.")
        self._procs = start_processes([StageSpec(self.cfg, self.hf_dir, seed, pp, n, block_size, dtype_name)
                                       for n in blocks], launcher, self.device)

    @property
    def vocab_size(self) -> int:
        return self.cfg.vocab_size

    @property
    def max_context(self) -> int:
        return self.cfg.max_position

    def default_prompt_tokens(self) -> int:
        """Hundreds to a few thousand tokens on a CPU (DESIGN §8)."""
        return min(1024, self.cfg.max_position // 2)

    def default_knobs(self) -> Knobs:
        """Wave budgets scaled to CPU-sized prompts (``runtime.control.knobs.CPU_KNOBS``)."""
        return CPU_KNOBS

    def build(self, pool: CachePool = PER_STAGE) -> EngineParts:
        """Fresh caches for one run, provided by ``pool`` (the policy's; the stage processes reset
        theirs to the sizes it gives)."""
        if self._procs is not None:
            sizes = pool.sizes(self.capacities)
            self._procs.reset(sizes)
            handles = [StageHandle(pool.caches(self.capacities, self.block_size)[0])]
            handles += [RemoteStageHandle(s, self._procs.procs.rpcs[s], n) for s, n in enumerate(sizes) if s > 0]
            return EngineParts(handles, self._procs, MemoryStore(), self.block_size)
        stages = build_stages(self.cfg, self.pp, self.capacities, self.block_size, self.weights,
                              device=self.device, dtype=self.dtype)
        handles = [StageHandle(cache) for cache in pool.caches(self.capacities, self.block_size)]
        return EngineParts(handles, TorchExecutor(stages, self.cfg.max_position), MemoryStore(), self.block_size)

    def close(self, orderly: bool = True) -> None:
        """Stop the stage processes (process launchers); idempotent. ``orderly=False`` (an interrupt):
        kill them at once - a wave stuck mid-link would hold an orderly shutdown for seconds."""
        if self._procs is not None:
            self._procs.close(orderly)
            self._procs = None

    def __enter__(self) -> TorchEngine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def open_store(self, deadline_s: float | None = None) -> Store:
        return await open_run_store(self.store_url, False, DEFAULT_COSTS, deadline_s)

    def telemetry(self, run: RunInfo | None = None, keep: bool = True, **options: Any) -> Telemetry:
        return run_telemetry(self.store_url, False, run, keep, num_stages=self.pp, **options)

    @property
    def virtual(self) -> bool:
        """Always the wall clock."""
        return False

    def runner(self) -> asyncio.Runner:
        """Where a run's coroutines run: an event loop on the wall clock."""
        return asyncio.Runner()
