"""The ``sim`` engine: virtual time, an analytic cost model, modelled coordination costs."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Sequence
from typing import Any, TypeVar

from runtime.engines.base import EngineParts, StageHandle
from runtime.engines.common import open_run_store, run_telemetry
from runtime.engines.coordination import DEFAULT_COSTS, CoordinationCosts, SimCostHook
from runtime.engines.sim.clock import run_virtual
from runtime.engines.sim.costmodel import AnalyticCostModel
from runtime.engines.sim.executor import SimExecutor
from runtime.engines.sim.profiles import get_hardware, get_model
from runtime.knobs import Knobs
from runtime.kvcache.stage_cache import StageCache
from store.base import Store
from store.memory import MemoryStore
from store.urls import parse_store_url
from telemetry.setup import Telemetry

T = TypeVar("T")


class SimEngine:
    """Builds simulated stages for ``model`` on ``hardware`` split into ``pp`` stages.

    ``kv_blocks``: blocks per stage (one value for all, or one per stage - uneven capacities
    make residency diverge); default: what the stage's memory holds after its weights.
    """

    name = "sim"

    def __init__(self, model: str, hardware: str, pp: int, block_size: int = 64,
                 kv_blocks: Sequence[int] | None = None, gpus_per_stage: int | None = None,
                 costs: CoordinationCosts = DEFAULT_COSTS, store_url: str = "memory",
                 realtime: bool = False, time_scale: float = 1.0) -> None:
        self.model = get_model(model)
        self.hardware = get_hardware(hardware)
        if pp < 1:
            raise ValueError(f"pp must be >= 1, got {pp}")
        if block_size < 1:
            raise ValueError(f"block size must be >= 1, got {block_size}")
        gps = gpus_per_stage or max(1, self.hardware.gpus_per_node // pp)
        self.cost_model = AnalyticCostModel(self.model, self.hardware, pp, gps)
        self.pp = pp
        self.block_size = block_size
        self.costs = costs
        self.store_url = parse_store_url(store_url)
        if time_scale <= 0:
            raise ValueError(f"time scale must be positive, got {time_scale}")
        self.realtime = realtime
        self.time_scale = time_scale
        if kv_blocks:
            if len(kv_blocks) == 1:
                kv_blocks = list(kv_blocks) * pp
            if len(kv_blocks) != pp or min(kv_blocks) < 1:
                raise ValueError(f"kv blocks: give one positive value or {pp} (one per stage), got {list(kv_blocks)}")
            self.capacities = list(kv_blocks)
        else:
            self.capacities = [self.cost_model.stage_kv_capacity_tokens(s) // block_size for s in range(pp)]
            if min(self.capacities) < 1:
                raise ValueError(f"{self.model.name} on {pp} x {gps} {self.hardware.name} leaves no room for KV cache")

    @property
    def vocab_size(self) -> int:
        return self.model.vocab_size

    def default_prompt_tokens(self) -> int:
        """Tens of thousands of tokens for the big profiles (DESIGN §8), within the model's context."""
        return min(32768, self.model.max_context // 2)

    @property
    def name_with_mode(self) -> str:
        return "sim-realtime" if self.realtime else "sim"

    def build(self) -> EngineParts:
        """Fresh stages for one run. In real time, coordination costs are paid for real (no hook)."""
        hook = None if self.realtime else SimCostHook(self.costs)
        handles = [StageHandle(StageCache(s, n, self.block_size), hook) for s, n in enumerate(self.capacities)]
        executor = SimExecutor(self.cost_model, self.time_scale, self.model.max_context)
        return EngineParts(handles, executor, MemoryStore(), self.block_size)

    def default_knobs(self) -> Knobs:
        """The published WavePP settings (M = 16384, b_min = 8192) suit these model sizes."""
        return Knobs()

    async def open_store(self) -> Store:
        return await open_run_store(self.store_url, not self.realtime, self.costs)

    def telemetry(self, run: str = "", keep: bool = True) -> Telemetry:
        """``keep=False``: no in-memory span list (a long-running live runtime uses a bounded ring)."""
        return run_telemetry(self.store_url, not self.realtime, run, keep)

    def run(self, main: Coroutine[Any, Any, T]) -> T:
        return asyncio.run(main) if self.realtime else run_virtual(main)
