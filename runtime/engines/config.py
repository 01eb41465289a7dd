"""What an engine is asked to build, one frozen record per engine, validated once: :class:`SimConfig` (the
simulator) and :class:`TorchConfig` (the decoder for real). The CLI, ``wavepp serve``, the dashboard's embedded
runtime and a what-if replay each make one and hand it to the engine (:mod:`runtime.engines.build`). Nothing
here imports torch: a command checks its flags before loading it."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from wavepp.runtime.engines.coordination import DEFAULT_COSTS, CoordinationCosts
from wavepp.runtime.engines.launchers import LAUNCHERS
from wavepp.runtime.engines.sim.profiles import DEFAULT_KV_DTYPE, KV_DTYPES

CLOCKS = ("virtual", "wall", "cpu")
COST_MODELS = ("auto", "analytic", "table")
COMMS = ("custom", "nccl")
DEFAULT_KV_MB = 256.0          # a torch stage's KV pool when no blocks are given


def per_stage_blocks(kv_blocks: Sequence[int] | None, pp: int) -> tuple[int, ...]:
    """KV blocks per stage: one value for every stage, or one per stage, each >= 1; none: ()."""
    blocks = tuple(kv_blocks or ())
    if len(blocks) == 1:
        blocks = blocks * pp
    if blocks and (len(blocks) != pp or min(blocks) < 1):
        raise ValueError(f"kv blocks: give one positive value or {pp} (one per stage), got {list(kv_blocks or ())}")
    return blocks


def check_stages(pp: int, block_size: int) -> None:
    if pp < 1:
        raise ValueError(f"pp must be >= 1, got {pp}")
    if block_size < 1:
        raise ValueError(f"block size must be >= 1, got {block_size}")


@dataclass(frozen=True, slots=True)
class SimConfig:
    """``model`` on ``hardware`` split into ``pp`` stages.

    ``kv_blocks``: blocks per stage, one value for all or one per stage (uneven capacities make residency
    diverge); empty: what each stage's memory holds after its weights. ``cost_profile``: a calibration file
    (``wavepp calibrate``) - the fitted model of a real engine replaces the analytic roofline, and its measured
    coordination costs the table. ``cost_model``: ``table`` (measured kernel tables under ``perf_dir``),
    ``analytic`` (roofline), or ``auto``: table wherever the tables cover the model and hardware, analytic
    elsewhere. ``host_work_scale`` multiplies the modelled lockstep host work of a conventional PP loop
    (:mod:`runtime.mechanisms.host_work`).

    ``clock``: ``virtual`` (coordination costs modelled, the loop's own code free), ``wall`` (everything paid
    for real, modelled steps slept, stretched by ``time_scale``), or ``cpu``: the real-time code path on a
    virtual clock that also advances by the loop's CPU time times ``cpu_scale``, whose idle waits take
    ``wake_s`` more than epoll's rounding (:class:`runtime.engines.sim.clock.CpuClockLoop`; a what-if replay of
    a real-time run). ``step_fit``: per stage ``(scale, offset_s)``: a step takes scale x the modelled time +
    offset (a replay's fit of the cost model to the steps a run timed). ``kv_dtype``: the KV cache's dtype,
    ``bf16`` (TensorRT-LLM's default for these FP8 checkpoints) or ``fp8``: half the bytes a cached token.
    ``comm``: the TP all-reduce's table, ``custom`` (TensorRT-LLM's kernel) or ``nccl``
    (:mod:`runtime.mechanisms.topology`).
    """

    model: str
    hardware: str
    pp: int
    block_size: int = 64
    kv_blocks: Sequence[int] | None = ()
    gpus_per_stage: int | None = None
    store_url: str = "memory"
    clock: str = "virtual"
    time_scale: float = 1.0
    cost_model: str = "auto"
    cost_profile: str | None = None
    perf_dir: str | None = None
    host_work_scale: float = 1.0
    cpu_scale: float = 1.0
    wake_s: float = 0.0
    step_fit: Sequence[tuple[float, float]] | None = None
    kv_dtype: str = DEFAULT_KV_DTYPE
    comm: str = "custom"
    costs: CoordinationCosts = DEFAULT_COSTS

    def __post_init__(self) -> None:
        check_stages(self.pp, self.block_size)
        if not self.time_scale > 0:
            raise ValueError(f"time scale must be positive, got {self.time_scale}")
        if not self.host_work_scale >= 0:
            raise ValueError(f"host work scale must be >= 0, got {self.host_work_scale}")
        if self.clock not in CLOCKS:
            raise ValueError(f"unknown clock {self.clock!r} ({', '.join(CLOCKS)})")
        if not self.cpu_scale > 0:
            raise ValueError(f"CPU scale must be positive, got {self.cpu_scale}")
        if not self.wake_s >= 0:
            raise ValueError(f"wake-up time must be >= 0, got {self.wake_s}")
        if self.comm not in COMMS:
            raise ValueError(f"unknown all-reduce {self.comm!r} ({', '.join(COMMS)})")
        if self.kv_dtype not in KV_DTYPES:
            raise ValueError(f"unknown KV dtype {self.kv_dtype!r} ({', '.join(KV_DTYPES)})")
        if self.cost_model not in COST_MODELS:
            raise ValueError(f"unknown cost model {self.cost_model!r} ({', '.join(COST_MODELS)})")
        fit = self.step_fit
        if fit is not None and (len(fit) != self.pp or not all(a > 0 and b >= 0 for a, b in fit)):
            raise ValueError(f"step fit: give {self.pp} (scale > 0, offset >= 0) pairs, one per stage, "
                             f"got {list(fit)}")
        object.__setattr__(self, "kv_blocks", per_stage_blocks(self.kv_blocks, self.pp))
        object.__setattr__(self, "step_fit", None if fit is None else tuple((float(a), float(b)) for a, b in fit))

    @property
    def realtime(self) -> bool:
        return self.clock == "wall"

    @property
    def virtual(self) -> bool:
        """Coordination costs modelled (else paid: on the wall clock or the CPU clock)."""
        return self.clock == "virtual"

    def replace(self, **changes: Any) -> SimConfig:
        return dataclasses.replace(self, **changes)

    def replay_args(self) -> dict[str, Any]:
        """What rebuilds this sim in virtual time: a saved run's ``meta["sim"]``, read back by a what-if replay
        (:func:`runtime.whatif.sim.sim_spec`)."""
        return {"model": self.model, "hardware": self.hardware, "gpus_per_stage": self.gpus_per_stage,
                "cost_model": self.cost_model, "cost_profile": self.cost_profile, "perf_dir": self.perf_dir,
                "host_work_scale": self.host_work_scale, "time_scale": self.time_scale, "clock": self.clock,
                "kv_dtype": self.kv_dtype, "comm": self.comm}


@dataclass(frozen=True, slots=True)
class TorchConfig:
    """``model`` (a name of a built-in config, a ``config.json`` or a Hugging Face directory) split into ``pp``
    stages. ``kv_blocks``: blocks per stage, one value or one per stage; empty: as many as ``kv_memory_mb`` holds
    on each stage. ``seed``: of the random weights (no Hugging Face directory). ``device``: default CUDA where
    there is one. ``launcher``: stages as threads of this process, or as ``torch.distributed`` processes
    (:mod:`runtime.engines.launchers`). ``sim_profile``: this model's ``wavepp calibrate`` profile on this machine,
    what a what-if replays the engine's runs with (the autopilot's search, Preview of a saved run); a run's meta
    names it (``meta["sim"]["cost_profile"]``). The stage count's upper bound (the model's layers) is checked by
    the engine, which reads the model."""

    model: str
    pp: int
    block_size: int = 64
    kv_blocks: Sequence[int] | None = ()
    kv_memory_mb: float = DEFAULT_KV_MB
    seed: int = 0
    store_url: str = "memory"
    device: str | None = None
    launcher: str = "threads"
    sim_profile: str | None = None

    def __post_init__(self) -> None:
        check_stages(self.pp, self.block_size)
        if self.launcher not in LAUNCHERS:
            raise ValueError(f"launcher must be one of {', '.join(LAUNCHERS)}, got {self.launcher!r}")
        if not self.kv_memory_mb > 0:
            raise ValueError(f"KV memory must be > 0 MB, got {self.kv_memory_mb}")
        object.__setattr__(self, "kv_blocks", per_stage_blocks(self.kv_blocks, self.pp))


EngineConfig = SimConfig | TorchConfig
