"""The simulator that replays: built like the engine that ran (:func:`sim_spec`, from a run's
description), and for a run on the wall clock fitted to the run's own spans (:func:`calibrated`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from wavepp.runtime.engines.config import SimConfig
from wavepp.runtime.engines.sim.clock import measure_wake
from wavepp.runtime.engines.sim.engine import SimEngine
from wavepp.runtime.whatif.calibrate import describe as describe_fit
from wavepp.runtime.whatif.calibrate import fit_cpu_scale, fit_steps
from wavepp.runtime.whatif.replay import Replay, WhatIfError


@dataclass(frozen=True, slots=True)
class SimSpec:
    """How to build the sim that stands in for the engine that ran."""

    engine: str                   # the engine observed: sim or torch
    model: str
    hardware: str
    pp: int
    block_size: int
    capacities: tuple[int, ...]
    gpus_per_stage: int | None = None
    cost_model: str = "auto"
    cost_profile: str | None = None
    perf_dir: str | None = None
    host_work_scale: float = 1.0
    time_scale: float = 1.0       # a real-time sim's stretch of its modelled step times
    # How the replay's time passes: "virtual" (the run was the virtual-time sim: the same model) or
    # "cpu" (the run paid its loop's work in real time: the replay pays the same code's CPU time,
    # times cpu_scale; runtime.whatif.calibrate fits cpu_scale and step_fit to the run's spans).
    clock: str = "virtual"
    cpu_scale: float = 1.0
    wake_s: float = 0.0           # how late a real loop on this machine wakes from an idle wait (measured)
    step_fit: tuple[tuple[float, float], ...] | None = None   # per stage: (scale, offset s) of the step time (torch)
    repeats: int = 1              # replays per setting, averaged (a CPU clock's replay is not deterministic)
    fit: str = ""                 # what the calibration measured, in words
    kv_dtype: str = "bf16"        # the sim's KV cache type and all-reduce, as the run had them
    comm: str = "custom"

    def build(self) -> SimEngine:
        """The sim that replays (the time scale still stretches its modelled step times)."""
        return SimEngine(SimConfig(
            self.model, self.hardware, self.pp, self.block_size, self.capacities, self.gpus_per_stage,
            cost_profile=self.cost_profile, cost_model="auto" if self.cost_profile else self.cost_model,
            perf_dir=self.perf_dir, host_work_scale=self.host_work_scale, time_scale=self.time_scale,
            clock=self.clock, cpu_scale=self.cpu_scale, wake_s=self.wake_s, step_fit=self.step_fit,
            kv_dtype=self.kv_dtype, comm=self.comm))

    @property
    def describe(self) -> str:
        what = f"sim calibrated on the torch engine ({self.cost_profile})" if self.cost_profile else \
            f"sim: {self.model} on {self.hardware}, PP{self.pp}"
        if self.clock == "cpu":
            fit = f" ({self.fit})" if self.fit else ""
            what += f", the loop's CPU time charged{fit}, median of {self.repeats} replays"
        return what


NO_CALIBRATION = ("no calibration: a torch run is previewed in the sim calibrated to it; make a profile with "
                  "`wavepp calibrate --engine torch --model {model} --pp {pp} --out FILE` and give it")


def sim_spec(meta: Mapping[str, Any], cost_profile: str | None = None) -> SimSpec:
    """The sim for a run described by ``meta`` (engine, model, hardware, pp, block_size, capacities;
    a sim run's ``sim`` arguments). A torch run needs ``cost_profile``; WhatIfError says why not."""
    from wavepp.runtime.engines.calibrate import check_profile
    engine, pp, block = str(meta.get("engine", "")), int(meta.get("pp") or 0), int(meta.get("block_size") or 64)
    capacities = tuple(int(c) for c in meta.get("capacities") or ())
    if pp < 1 or len(capacities) != pp:
        raise WhatIfError("the run does not say its stages and their KV capacities: it cannot be replayed")
    sim_args = dict(meta.get("sim") or {})
    profile_path = cost_profile or sim_args.get("cost_profile")
    if engine == "torch" and not profile_path:
        raise WhatIfError(NO_CALIBRATION.format(model=meta.get("model") or "MODEL", pp=pp))
    if engine not in ("sim", "torch"):
        raise WhatIfError(f"cannot replay a run of engine {engine!r} (sim or torch)")
    if profile_path:
        try:
            profile = check_profile(profile_path, str(meta.get("model") or "") if engine == "torch" else None, pp)
        except ValueError as exc:
            raise WhatIfError(str(exc)) from None
        return SimSpec(engine, str(profile.get("model", "")), "", pp, block, capacities, cost_profile=profile_path,
                       time_scale=float(sim_args.get("time_scale", 1.0)), **_clock(engine, sim_args))
    model, hardware = sim_args.get("model") or meta.get("model"), sim_args.get("hardware") or meta.get("hardware")
    if not model or not hardware:
        raise WhatIfError("the run does not say which model and hardware the sim ran: it cannot be replayed")
    return SimSpec(engine, str(model), str(hardware), pp, block, capacities, sim_args.get("gpus_per_stage"),
                   sim_args.get("cost_model") or "auto", None, sim_args.get("perf_dir"),
                   float(sim_args.get("host_work_scale", 1.0)), float(sim_args.get("time_scale", 1.0)),
                   kv_dtype=str(sim_args.get("kv_dtype") or "bf16"), comm=str(sim_args.get("comm") or "custom"),
                   **_clock(engine, sim_args))


CPU_CLOCK_REPEATS = 3     # a CPU-clock replay varies run to run (as the runtime does): the median of this many


def _clock(engine: str, sim_args: Mapping[str, Any]) -> dict[str, Any]:
    """A run on the wall clock (the torch engine, a real-time sim) is replayed on the CPU clock; the
    virtual-time sim by itself."""
    realtime = engine == "torch" or sim_args.get("clock") == "wall" or bool(sim_args.get("realtime"))
    return {"clock": "cpu", "repeats": CPU_CLOCK_REPEATS} if realtime else {}


def calibrated(replay: Replay, spec: SimSpec) -> SimSpec:
    """A real-time run's replay fitted to the run's spans over the window (:mod:`runtime.whatif.calibrate`);
    the virtual-time sim's replay is the sim itself: nothing to fit."""
    if spec.clock != "cpu" or not replay.observed:
        return spec
    steps = None
    if spec.engine == "torch":
        engine = spec.build()
        try:
            steps = fit_steps(replay.observed, engine.cost_model, spec.pp, spec.time_scale)
        finally:
            engine.close()
    # The run's pure-CPU spans say how much of a core its loop had (wall / CPU time); it is shown, not
    # charged: the replay charges its thread's CPU time as it is (module doc of whatif_calibrate).
    loop = fit_cpu_scale(replay.observed)
    wake = measure_wake()
    return dataclasses.replace(spec, cpu_scale=1.0, wake_s=wake, step_fit=steps, fit=describe_fit(loop, steps, wake))
