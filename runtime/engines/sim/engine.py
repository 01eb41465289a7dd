"""The ``sim`` engine: virtual time, a stage cost model (kernel tables or roofline), modelled coordination costs."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

from wavepp.runtime.control.knobs import CPU_KNOBS, Knobs
from wavepp.runtime.engines.base import EngineParts
from wavepp.runtime.engines.calibrate import FittedCostModel, load_profile
from wavepp.runtime.engines.common import open_run_store, run_telemetry
from wavepp.runtime.engines.config import SimConfig
from wavepp.runtime.engines.coordination import CoordinationCosts, SimCostHook
from wavepp.runtime.engines.sim.capacity import kv_bytes_per_token_per_gpu
from wavepp.runtime.engines.sim.clock import virtual_runner
from wavepp.runtime.engines.sim.costmodel import AnalyticCostModel, CostModel
from wavepp.runtime.engines.sim.executor import SimExecutor
from wavepp.runtime.engines.sim.perf_interp import TableCoverageError
from wavepp.runtime.engines.sim.profiles import (
    ModelProfile,
    get_hardware,
    get_model,
    split_layers,
)
from wavepp.runtime.engines.sim.table_choices import Choices
from wavepp.runtime.engines.sim.table_cost import load_table_cost_model
from wavepp.runtime.kvcache.handle import StageHandle
from wavepp.runtime.kvcache.pools import CachePool, PerStage
from wavepp.runtime.kvcache.state_snapshots import DEFAULT_SNAPSHOT_INTERVAL, StateSpec
from wavepp.runtime.mechanisms.topology import Topology
from wavepp.runtime.runs.runfile import RunInfo
from wavepp.store.base import Store
from wavepp.store.memory import MemoryStore
from wavepp.store.urls import parse_store_url
from wavepp.telemetry.setup import Telemetry

PER_STAGE = PerStage()

# Every KV block is a Python object in its stage's pool (runtime.kvcache.block_pool): beyond this
# many in all, building the stages alone takes many GB and minutes (e.g. glm-5.2 on PP64: 189M).
MAX_SIM_BLOCKS = 1 << 26


class SimEngine:
    """Builds simulated stages for a :class:`SimConfig`: ``model`` on ``hardware`` split into ``pp`` stages."""

    name = "sim"

    def __init__(self, config: SimConfig) -> None:
        """The stages ``config`` describes; what depends on the model's profile or a calibration file (the
        KV capacities, the cost model) is checked here, the rest by :class:`SimConfig` itself.
        A hybrid model's stages keep recurrent-state snapshots (:mod:`runtime.kvcache.state_snapshots`), every
        ``snapshot_interval`` knob tokens (the loop sets it on the stages)."""
        self.config = config
        model, hardware, pp, block_size = config.model, config.hardware, config.pp, config.block_size
        self.pp = pp
        self.block_size = block_size
        self.model_name, self.hardware_name = model, hardware
        self.gpus_per_stage = config.gpus_per_stage or 1
        self.store_url = parse_store_url(config.store_url)
        self.profile: dict[str, Any] | None = None
        self.states: list[StateSpec | None] | None = None
        self.cost_model: CostModel
        if config.cost_profile is not None:
            self.cost_model_name = "fitted"
            self.profile = load_profile(config.cost_profile)
            if self.profile["pp"] != pp:
                raise ValueError(f"the cost profile was measured with pp={self.profile['pp']}, not {pp}")
            self.cost_model = FittedCostModel(self.profile)
            self.costs = CoordinationCosts(**self.profile["coordination"])
            self._vocab, self._context = int(self.profile["vocab_size"]), int(self.profile["max_context"])
            default = [int(n) * int(self.profile["block_size"]) // block_size for n in self.profile["capacities"]]
        else:
            m, hw = get_model(model).with_kv_dtype(config.kv_dtype), get_hardware(hardware)
            gps = self.gpus_per_stage = config.gpus_per_stage or max(1, hw.gpus_per_node // pp)
            analytic = AnalyticCostModel(m, hw, pp, gps)  # also the memory figures: capacities below
            self.cost_model, self.cost_model_name = analytic, "analytic"
            if config.cost_model != "analytic":
                try:
                    self.cost_model = load_table_cost_model(m.name, hw.name, pp, gps, config.perf_dir,
                                                            Choices(comm=config.comm), kv_dtype=config.kv_dtype)
                    self.cost_model_name = "table"
                except TableCoverageError as exc:
                    if config.cost_model == "table":
                        raise
                    self.cost_model_name = f"analytic ({exc})"  # auto: the tables do not cover this
            self.costs = config.costs
            self._vocab, self._context = m.vocab_size, m.max_context
            default = [analytic.stage_kv_capacity_tokens(s) // block_size for s in range(pp)]
            self.states = state_specs(m, pp, gps, block_size, DEFAULT_SNAPSHOT_INTERVAL)
            if min(default) < 1:
                raise ValueError(f"{m.name} on {pp} x {gps} {hw.name} leaves no room for KV cache")
        self.costs = dataclasses.replace(self.costs, host_work_scale=config.host_work_scale)
        self.capacities = list(config.kv_blocks) if config.kv_blocks else default
        if sum(self.capacities) > MAX_SIM_BLOCKS:
            raise ValueError(f"{pp} stages hold {sum(self.capacities):,} KV blocks of {block_size} tokens in all; the "
                             f"simulator keeps at most {MAX_SIM_BLOCKS:,}: give --kv-blocks, a smaller --pp or a "
                             f"larger --block-size")

    @property
    def realtime(self) -> bool:
        return self.config.realtime

    @property
    def kv_dtype(self) -> str:
        return self.config.kv_dtype

    @property
    def virtual(self) -> bool:
        """Coordination costs modelled (else paid: on the wall clock or the CPU clock)."""
        return self.config.virtual

    @property
    def vocab_size(self) -> int:
        return self._vocab

    @property
    def max_context(self) -> int:
        return self._context

    def default_prompt_tokens(self) -> int:
        """Tens of thousands of tokens for the big profiles (DESIGN §8); a calibrated CPU model's own scale."""
        if self.profile is not None:
            return min(1024, self._context // 2)
        return min(32768, self._context // 2)

    def laid_out(self, topology: Topology) -> SimEngine:
        """This engine, or one like it with the stages ``topology`` lays over the same GPUs (a tensor/expert-
        parallel deployment: one stage over them all). Per-stage ``kv_blocks`` given for this layout are not
        carried to another: that one's single pool is the smallest of them, given (a tight deployment stays
        tight), else what its memory holds."""
        gps = self.gpus_per_stage
        pp, gps_new = topology.layout(self.pp, gps)
        if (pp, gps_new) == (self.pp, gps) and topology.comm == self.config.comm:
            return self
        if self.profile is not None:
            raise ValueError(f"topology {topology.name!r}: a calibrated cost profile was measured on {self.pp} stages")
        blocks = [min(self.config.kv_blocks)] * pp if self.config.kv_blocks else ()
        # A fit of each stage's steps (step_fit) belongs to these stages, not to the ones laid out anew.
        return SimEngine(self.config.replace(pp=pp, kv_blocks=blocks, gpus_per_stage=gps_new, comm=topology.comm,
                                             step_fit=None))

    @property
    def replay_args(self) -> dict[str, Any]:
        """What rebuilds this sim in virtual time (a what-if replay of one of its runs: runtime.whatif.preview)."""
        return self.config.replay_args()

    def build(self, pool: CachePool = PER_STAGE) -> EngineParts:
        """Fresh stages for one run, their caches provided by ``pool`` (the policy's). In real time
        (and on the CPU clock), coordination costs are paid for real (no hook)."""
        hook = SimCostHook(self.costs) if self.virtual else None
        caches = pool.caches(self.capacities, self.block_size, self.states)
        handles = [StageHandle(cache, hook) for cache in caches]
        executor = SimExecutor(self.cost_model, self.config.time_scale, self._context, self.config.step_fit)
        return EngineParts(handles, executor, MemoryStore(), self.block_size)

    def default_knobs(self) -> Knobs:
        """The published WavePP settings (M = 16384, b_min = 8192) suit the big profiles; a
        calibrated model gets the knobs of the engine it was measured on."""
        if self.profile is not None:
            return CPU_KNOBS
        return Knobs()

    async def open_store(self, deadline_s: float | None = None) -> Store:
        return await open_run_store(self.store_url, self.virtual, self.costs, deadline_s)

    def telemetry(self, run: RunInfo | None = None, keep: bool = True, **options: Any) -> Telemetry:
        """``keep=False``: no in-memory span list (a long-running live runtime uses a bounded ring)."""
        return run_telemetry(self.store_url, not self.realtime, run, keep, num_stages=self.pp, **options)

    def runner(self) -> asyncio.Runner:
        """Where a run's coroutines run: an event loop on the wall clock (real time), else in virtual time
        (the CPU clock's with ``clock="cpu"``)."""
        if self.realtime:
            return asyncio.Runner()
        c = self.config
        return virtual_runner(c.cpu_scale if c.clock == "cpu" else None, c.wake_s)

    def close(self, orderly: bool = True) -> None:
        """Nothing to stop (the torch engine may have stage processes)."""


def state_specs(model: ModelProfile, pp: int, gpus_per_stage: int, block_size: int,
                interval_tokens: int) -> list[StateSpec | None] | None:
    """Per stage what a state snapshot costs its pool, in KV blocks of that stage (None: no linear layers
    anywhere). A stage's state and its KV share one pool (vLLM's hybrid allocator pages them together;
    SGLang sizes a separate pool by a ratio instead), so a snapshot takes the blocks its bytes fill."""
    if not model.linear_layers:
        return None
    specs: list[StateSpec | None] = []
    for layers in split_layers(model.num_layers, pp):
        state = model.state_bytes_per_sequence(layers, gpus_per_stage)
        if not state:
            specs.append(None)
            continue
        block = kv_bytes_per_token_per_gpu(model, layers, gpus_per_stage) * block_size
        if not block:
            raise ValueError(f"{model.name}: a stage of linear layers only keeps no KV to size its states by")
        specs.append(StateSpec(slot_blocks=-(-int(state) // int(block)), interval_blocks=interval_tokens // block_size))
    return specs

