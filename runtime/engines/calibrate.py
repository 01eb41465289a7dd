"""Teach the simulator the torch engine's costs: measure, fit ``t(L, x)`` per stage, save a profile.

DESIGN §2 models one stage step as ``t(L, x) = c + γ·L + β·x + α·(2·L·x + x²)`` for a chunk of x
new tokens after L tokens of context. ``calibrate`` times each stage's forward over a grid of
(L, x), fits the four coefficients per stage by least squares, and records the coordination
costs measured on this machine. :class:`FittedCostModel` is the simulator's cost model from
that profile (``wavepp bench --engine sim --cost-model fitted --cost-profile FILE``).
"""

from __future__ import annotations

import json
import statistics
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from runtime.engines.coordination import measure
from runtime.engines.sim.costmodel import ChunkShape

GRID_L = (0, 256, 512, 1024, 1536)
GRID_X = (16, 64, 128, 256, 512)
FORMAT = "wavepp-cost-profile/1"


@dataclass(frozen=True, slots=True)
class StageFit:
    c: float
    gamma: float
    beta: float
    alpha: float

    def time(self, context: int, tokens: int) -> float:
        return self.gamma * context + self.beta * tokens + self.alpha * (2 * context * tokens + tokens * tokens)


def fit(samples: Sequence[tuple[int, int, float]]) -> StageFit:
    """Least squares of ``t = c + γL + βx + α(2Lx + x²)`` over (L, x, seconds) samples."""
    a = np.array([[1.0, L, x, 2 * L * x + x * x] for L, x, _ in samples])
    b = np.array([t for _, _, t in samples])
    coef, *_ = np.linalg.lstsq(a, b, rcond=None)
    return StageFit(*(float(v) for v in coef))


def _time_stage(stage: Any, first: bool, hidden: int, block_size: int, context: int, tokens: int,
                repeats: int) -> float:
    blocks = -(-(context + tokens) // block_size)
    table = tuple(range(blocks))
    from runtime.engines.torch.model import ChunkSpec
    inputs = (torch.randint(0, 100, (tokens,)) if first else torch.randn(tokens, hidden))
    spec = [ChunkSpec(context, tokens, table)]
    stage.forward_wave(inputs, spec)                    # warm-up (allocator, kernels)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        stage.forward_wave(inputs, spec)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def calibrate(engine: Any, grid_l: Sequence[int] = GRID_L, grid_x: Sequence[int] = GRID_X,
              repeats: int = 3) -> dict[str, Any]:
    """Measure ``engine`` (a TorchEngine) and return the cost profile (JSON-ready)."""
    parts = engine.build()
    stages = parts.executor.stages
    cfg = engine.cfg
    need = max(grid_l) + max(grid_x)
    for s, stage in enumerate(stages):
        if -(-need // engine.block_size) > stage.num_blocks:
            raise ValueError(f"stage {s} has {stage.num_blocks} blocks; the grid needs {need} tokens")
    points = [(L, x) for L in grid_l for x in grid_x if L + x <= cfg.max_position]
    # All stages are measured at once, each in its own thread as the engine runs them, so the
    # fit includes what the stages cost each other (cores, memory bandwidth, the GIL between
    # kernels). A stage that finishes its grid keeps working until every stage has finished.
    lock, completed, done = threading.Lock(), [0], threading.Event()

    def measure_stage(s: int) -> list[tuple[int, int, float]]:
        stage = stages[s]
        samples = [(L, x, _time_stage(stage, s == 0, cfg.hidden_size, engine.block_size, L, x, repeats))
                   for L, x in points]
        with lock:
            completed[0] += 1
            if completed[0] == len(stages):
                done.set()
        while not done.is_set():
            L, x = points[-1]
            _time_stage(stage, s == 0, cfg.hidden_size, engine.block_size, L, x, 1)
        return samples

    with ThreadPoolExecutor(len(stages)) as pool:
        samples_all = list(pool.map(measure_stage, range(len(stages))))
    fits = [fit(samples) for samples in samples_all]
    parts.executor.close()
    return {
        "format": FORMAT, "engine": "torch", "model": engine.model_name, "pp": engine.pp,
        "block_size": engine.block_size, "vocab_size": cfg.vocab_size, "max_context": cfg.max_position,
        "capacities": engine.capacities, "threads": torch.get_num_threads(),
        "stages": [{"c": f.c, "gamma": f.gamma, "beta": f.beta, "alpha": f.alpha} for f in fits],
        "samples": samples_all, "coordination": measure().as_dict(),
    }


def save_profile(path: str | Path, profile: dict[str, Any]) -> None:
    Path(path).write_text(json.dumps(profile, indent=1))


def load_profile(path: str | Path) -> dict[str, Any]:
    try:
        data = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise ValueError(f"no such cost profile: {path}") from None
    except (OSError, ValueError) as exc:
        raise ValueError(f"{path} is not a cost profile: {exc}") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ValueError(f"{path} is not a cost profile (expected format {FORMAT})")
    return data


class FittedCostModel:
    """The simulator's cost model from a calibration profile: per wave, the fitted constant once
    plus each chunk's context and token terms; activations move between threads for free."""

    def __init__(self, profile: dict[str, Any]) -> None:
        self.fits = [StageFit(**s) for s in profile["stages"]]

    @property
    def num_stages(self) -> int:
        return len(self.fits)

    def step_time(self, stage: int, chunks: Sequence[ChunkShape]) -> float:
        if not chunks:
            return 0.0
        f = self.fits[stage]
        return max(0.0, f.c + sum(f.time(c.context, c.tokens) for c in chunks))

    def transfer_time(self, stage: int, num_tokens: int) -> float:
        return 0.0
