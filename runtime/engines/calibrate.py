"""Teach the simulator the torch engine's costs: measure, fit ``t(L, x)`` per stage, save a profile.

The wave model and its fit are :mod:`runtime.planning.step_times`' (six non-negative coefficients per
stage: per wave, per chunk - building its gather and mask, one attention call per layer - per
context token, per new token, and two attention terms; this engine's masked CPU attention scores
the whole ``x × (L + x)`` rectangle, ``∝ L·x + x²``, and the fit finds it).

``calibrate`` times each stage's forward on waves of 1 to 8 chunks over a grid of (L, x) that
covers the contexts and wave budgets a run uses, all stages at once as in a run, fits the six
coefficients per stage by least squares on *relative* residuals (a 20 ms wave counts as much as a
700 ms one), and records the coordination costs measured on this machine.
:class:`FittedCostModel` is the simulator's cost model from that profile
(``wavepp bench --engine sim --cost-model fitted --cost-profile FILE``).
"""

from __future__ import annotations

import json
import math
import statistics
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import MISSING, fields
from pathlib import Path
from typing import Any, cast

from wavepp.runtime.engines.coordination import CoordinationCosts, measure
from wavepp.runtime.engines.sim.costmodel import ChunkShape
from wavepp.runtime.planning.step_times import StageFit, fit_waves
from wavepp.runtime.request import cdiv

GRID_L = (0, 256, 512, 1024, 1536, 2048, 3072)
GRID_X = (16, 64, 128, 256, 512, 1024)
GRID_N = (1, 2, 4, 8)
FORMAT = "wavepp-cost-profile/2"

Wave = tuple[int, int, int]                  # n chunks, each x new tokens after L of context: (L, x, n)


def fit(samples: Sequence[tuple[int, int, int, float]]) -> StageFit:
    """The wave model over (L, x, n, seconds) samples (:func:`runtime.planning.step_times.fit_waves`:
    non-negative least squares on relative residuals)."""
    return fit_waves(samples)


def wave_grid(max_context: int, max_wave_tokens: int, grid_l: Sequence[int] = GRID_L,
              grid_x: Sequence[int] = GRID_X, grid_n: Sequence[int] = GRID_N) -> list[Wave]:
    """The (L, x, n) waves to time: each chunk fits the context, each wave the token budget."""
    return [(L, x, n) for L in grid_l for x in grid_x for n in grid_n
            if L + x <= max_context and n * x <= max_wave_tokens]


def _time_stage(stage: Any, first: bool, hidden: int, block_size: int, wave: Wave, repeats: int) -> float:
    import torch

    from wavepp.runtime.engines.torch.model import ChunkSpec
    L, x, n = wave
    per = cdiv(L + x, block_size)
    # Each chunk reads its own blocks, as different requests do (not one prefix n times from cache).
    specs = [ChunkSpec(L, x, tuple((i * per + j) % stage.num_blocks for j in range(per))) for i in range(n)]
    inputs = (torch.randint(0, 100, (n * x,)) if first else torch.randn(n * x, hidden))
    with torch.inference_mode():
        stage.forward_wave(inputs, specs)    # warm-up (allocator, kernels)
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            stage.forward_wave(inputs, specs)
            times.append(time.perf_counter() - t0)
    return statistics.median(times)


def calibrate(engine: Any, waves: Sequence[Wave] | None = None, repeats: int = 2,
              max_wave_tokens: int = 1024, progress: Callable[[int, int], None] | None = None) -> dict[str, Any]:
    """Measure ``engine`` (a TorchEngine) and return the cost profile (JSON-ready).

    ``max_wave_tokens``: the largest wave timed (the CPU knobs' ``M``); ``waves`` overrides the grid;
    ``progress(done, total)``: called as each stage times each wave (from the stages' threads).
    """
    import torch  # here, not at the top: the sim loads this module for its fitted cost model

    parts = engine.build()
    stages = parts.executor.stages
    cfg = engine.cfg
    points = list(waves) if waves is not None else wave_grid(cfg.max_position, max_wave_tokens)
    if not points:
        raise ValueError(f"no calibration wave fits {max_wave_tokens} tokens and a context of {cfg.max_position} "
                         f"(the smallest chunk timed is {min(GRID_X)} tokens)")
    for s, stage in enumerate(stages):
        need = max(cdiv(L + x, engine.block_size) for L, x, _ in points)
        if need > stage.num_blocks:
            raise ValueError(f"stage {s} has {stage.num_blocks} blocks; the grid needs {need} per chunk")
    # All stages are measured at once, each in its own thread as the engine runs them, so the
    # fit includes what the stages cost each other (cores, memory bandwidth, the GIL between
    # kernels). A stage that finishes its grid keeps working until every stage has finished.
    lock, completed, done = threading.Lock(), [0], threading.Event()

    timed, total = [0], len(points) * len(stages)

    def measure_stage(s: int) -> list[tuple[int, int, int, float]]:
        stage = stages[s]
        samples = []
        for w in points:
            samples.append((*w, _time_stage(stage, s == 0, cfg.hidden_size, engine.block_size, w, repeats)))
            if progress is not None:
                with lock:
                    timed[0] += 1
                    progress(timed[0], total)
        with lock:
            completed[0] += 1
            if completed[0] == len(stages):
                done.set()
        busy = max(points, key=lambda w: w[1] * w[2])
        while not done.is_set():
            _time_stage(stage, s == 0, cfg.hidden_size, engine.block_size, busy, 1)
        return samples

    with ThreadPoolExecutor(len(stages)) as pool:
        samples_all = list(pool.map(measure_stage, range(len(stages))))
    fits = [fit(samples) for samples in samples_all]
    parts.executor.close()
    return {
        "format": FORMAT, "engine": "torch", "model": engine.model_name, "pp": engine.pp,
        "block_size": engine.block_size, "vocab_size": cfg.vocab_size, "max_context": cfg.max_position,
        "capacities": engine.capacities, "threads": torch.get_num_threads(),
        "stages": [{"c": f.c, "c_chunk": f.c_chunk, "gamma": f.gamma, "beta": f.beta,
                    "alpha_lx": f.alpha_lx, "alpha_xx": f.alpha_xx} for f in fits],
        "samples": samples_all, "coordination": measure().as_dict(),
    }


def fit_error(profile: dict[str, Any]) -> list[tuple[float, float]]:
    """Per stage: median and max |relative error| of the fit over its own samples."""
    out = []
    for f, samples in zip((StageFit(**s) for s in profile["stages"]), profile["samples"], strict=True):
        errs = [abs(f.step_time([(L, x)] * n) / t - 1) for L, x, n, t in samples]
        out.append((statistics.median(errs), max(errs)))
    return out


def save_profile(path: str | Path, profile: dict[str, Any]) -> None:
    Path(path).write_text(json.dumps(profile, indent=1))


REMAKE = "make a new one with `wavepp calibrate --engine torch --model MODEL --pp N --out FILE`"


def load_profile(path: str | Path) -> dict[str, Any]:
    """A calibration profile, checked field by field: a malformed one is one ``ValueError`` line that
    names the field and says how to make a new profile (never a KeyError deep in the simulator)."""
    try:
        data = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise ValueError(f"no such cost profile: {path}") from None
    except (OSError, ValueError) as exc:
        raise ValueError(f"{path} is not a cost profile: {exc}") from None
    found = data.get("format") if isinstance(data, dict) else None
    if isinstance(found, str) and found.startswith("wavepp-cost-profile/") and found != FORMAT:
        raise ValueError(f"{path} is a cost profile of an older format ({found}; this release reads {FORMAT}): "
                         f"{REMAKE}")
    if found != FORMAT:
        raise ValueError(f"{path} is not a cost profile (expected format {FORMAT}): {REMAKE}")
    problem = _profile_problem(data)
    if problem:
        raise ValueError(f"{path} is not a valid cost profile: {problem}; {REMAKE}")
    return cast(dict[str, Any], data)      # checked field by field above


def check_profile(path: str | Path, model: str | None, pp: int) -> dict[str, Any]:
    """:func:`load_profile`, and measured on ``pp`` stages of ``model`` (None: any model); ValueError says
    which does not match."""
    profile = load_profile(path)
    if profile["pp"] != pp:
        raise ValueError(f"the cost profile {path} was measured with pp={profile['pp']}; the run has {pp}")
    if model and profile.get("model") != model:
        raise ValueError(f"the cost profile {path} was measured on {profile.get('model')}; the run is {model}")
    return profile


def _profile_problem(data: dict[str, Any]) -> str | None:
    """What is wrong with a profile's fields, or None."""
    for key in ("pp", "block_size", "vocab_size", "max_context"):
        value = data.get(key)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            return f"{key!r} must be a positive integer, got {json.dumps(value)}"
    pp = data["pp"]
    capacities, stages = data.get("capacities"), data.get("stages")
    if not isinstance(capacities, list) or len(capacities) != pp:
        return f"'capacities' must list {pp} stages"
    if not all(isinstance(c, int) and not isinstance(c, bool) and c >= 1 for c in capacities):
        return f"'capacities' must be positive block counts, got {json.dumps(capacities)}"
    if not isinstance(stages, list) or len(stages) != pp:
        return f"'stages' must list {pp} fits"
    for s, stage in enumerate(stages):
        problem = _numbers_problem(f"stages[{s}]", stage, StageFit)
        if problem:
            return problem
    return _numbers_problem("coordination", data.get("coordination"), CoordinationCosts)


def _numbers_problem(name: str, value: Any, schema: type) -> str | None:
    """``value`` must hold a finite number for each field of the dataclass ``schema`` (those with a
    default may be absent: a profile from before they existed) and nothing else."""
    keys = [f.name for f in fields(schema)]
    required = [f.name for f in fields(schema) if f.default is MISSING]
    if not isinstance(value, dict):
        return f"{name!r} must be an object with {', '.join(required)}"
    missing, extra = [k for k in required if k not in value], sorted(set(value) - set(keys))
    if missing or extra:
        return f"{name!r}: " + "; ".join(([f"missing {', '.join(missing)}"] if missing else [])
                                         + ([f"unknown {', '.join(extra)}"] if extra else []))
    for k in (k for k in keys if k in value):
        v = value[k]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            return f"{name}.{k} must be a finite number, got {json.dumps(v)}"
    return None


class FittedCostModel:
    """The simulator's cost model from a calibration profile: per wave, the fitted constant once
    plus each chunk's own constant, context and token terms; activations move between threads
    for free."""

    def __init__(self, profile: dict[str, Any]) -> None:
        self.fits = [StageFit(**s) for s in profile["stages"]]

    @property
    def num_stages(self) -> int:
        return len(self.fits)

    def step_time(self, stage: int, chunks: Sequence[ChunkShape]) -> float:
        return self.fits[stage].step_time([(c.context, c.tokens) for c in chunks])

    def step_times(self, chunks: Sequence[ChunkShape]) -> list[float]:
        return [self.step_time(s, chunks) for s in range(self.num_stages)]

    def transfer_time(self, stage: int, num_tokens: int) -> float:
        return 0.0
