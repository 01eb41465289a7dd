"""Calibration: the fit recovers t(L, x) and the sim runs on a fitted profile."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from runtime.bench import BenchConfig, run_one
from runtime.engines.calibrate import FORMAT, FittedCostModel, StageFit, fit, load_profile
from runtime.engines.coordination import DEFAULT_COSTS
from runtime.engines.sim.costmodel import ChunkShape
from runtime.engines.sim.engine import SimEngine
from runtime.workloads import parse_workload


def test_fit_recovers_the_coefficients() -> None:
    truth = StageFit(c=2e-3, gamma=1e-6, beta=5e-5, alpha=3e-9)
    samples = [(L, x, truth.c + truth.time(L, x)) for L in (0, 100, 400, 900) for x in (8, 32, 128, 256)]
    got = fit(samples)
    for name in ("c", "gamma", "beta", "alpha"):
        assert getattr(got, name) == pytest.approx(getattr(truth, name), rel=1e-6)


def profile(pp: int = 2) -> dict:
    return {"format": FORMAT, "engine": "torch", "model": "tiny", "pp": pp, "block_size": 16, "vocab_size": 512,
            "max_context": 4096, "capacities": [2000] * pp, "threads": 1,
            "stages": [{"c": 1e-3, "gamma": 1e-7, "beta": 1e-5, "alpha": 1e-9}] * pp,
            "coordination": DEFAULT_COSTS.as_dict()}


def test_fitted_cost_model_charges_the_constant_once_per_wave() -> None:
    m = FittedCostModel(profile())
    one = m.step_time(0, [ChunkShape(100, 50)])
    two = m.step_time(0, [ChunkShape(100, 50), ChunkShape(100, 50)])
    assert two == pytest.approx(2 * one - 1e-3)
    assert m.transfer_time(0, 100) == 0.0


def test_sim_runs_on_a_fitted_profile(tmp_path: Path) -> None:
    path = tmp_path / "p.json"
    path.write_text(json.dumps(profile()))
    engine = SimEngine("tiny", "h200", 2, block_size=16, cost_profile=str(path))
    assert engine.vocab_size == 512 and engine.capacities == [2000, 2000]
    cfg = BenchConfig(parse_workload("reuse90"), [4], ["wavepp"], 16, prompt_tokens=256)
    cfg.knobs = engine.default_knobs()
    rec = run_one(engine, cfg, "wavepp", 4)
    assert rec.figures.completed == 16 and rec.figures.input_tokens_per_s > 0
    with pytest.raises(ValueError, match="pp=2"):
        SimEngine("tiny", "h200", 3, cost_profile=str(path))
    with pytest.raises(ValueError, match="not a cost profile"):
        bad = tmp_path / "bad.json"
        bad.write_text("{}")
        load_profile(bad)
