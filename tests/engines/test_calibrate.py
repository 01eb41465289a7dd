"""Calibration: the wave grid, the fit recovers the wave model, a real calibration of a small torch
model yields a profile the sim runs on."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from wavepp.runtime.bench.runs import BenchConfig, run_one
from wavepp.runtime.engines.calibrate import (
    FORMAT,
    FittedCostModel,
    StageFit,
    calibrate,
    fit,
    fit_error,
    load_profile,
    save_profile,
    wave_grid,
)
from wavepp.runtime.engines.config import SimConfig
from wavepp.runtime.engines.coordination import DEFAULT_COSTS
from wavepp.runtime.engines.sim.costmodel import ChunkShape
from wavepp.runtime.engines.sim.engine import SimEngine
from wavepp.runtime.sources.workloads import parse_workload

TRUTH = StageFit(c=2e-3, c_chunk=3e-4, gamma=1e-6, beta=5e-5, alpha_lx=3e-9, alpha_xx=7e-9)


def test_wave_grid_keeps_chunks_in_the_context_and_waves_in_the_budget() -> None:
    grid = wave_grid(max_context=1024, max_wave_tokens=512)
    assert grid and all(L + x <= 1024 and n * x <= 512 for L, x, n in grid)
    assert {n for _, _, n in grid} == {1, 2, 4, 8}              # multi-chunk waves, not only single chunks
    assert (0, 512, 1) in grid and (0, 512, 2) not in grid and (1024, 16, 1) not in grid


def test_fit_recovers_the_wave_model() -> None:
    samples = [(L, x, n, TRUTH.step_time([(L, x)] * n))
               for L in (0, 100, 400, 900) for x in (8, 32, 128, 256) for n in (1, 2, 4)]
    got = fit(samples)
    for name in ("c", "c_chunk", "gamma", "beta", "alpha_lx", "alpha_xx"):
        assert getattr(got, name) == pytest.approx(getattr(TRUTH, name), rel=1e-6)


def test_the_wave_constant_is_paid_once_and_the_chunk_constant_per_chunk() -> None:
    one = TRUTH.step_time([(100, 50)])
    assert TRUTH.step_time([(100, 50)] * 3) == pytest.approx(3 * one - 2 * TRUTH.c)
    assert TRUTH.step_time([]) == 0.0
    assert TRUTH.step_time([(0, 1)]) - TRUTH.step_time([(0, 1)] * 2) < 0      # a second chunk costs


def profile(pp: int = 2) -> dict:
    coef = {"c": 1e-3, "c_chunk": 1e-4, "gamma": 1e-7, "beta": 1e-5, "alpha_lx": 1e-9, "alpha_xx": 2e-9}
    return {"format": FORMAT, "engine": "torch", "model": "tiny", "pp": pp, "block_size": 16, "vocab_size": 512,
            "max_context": 4096, "capacities": [2000] * pp, "threads": 1, "stages": [coef] * pp,
            "samples": [[]] * pp, "coordination": DEFAULT_COSTS.as_dict()}


def test_fitted_cost_model_is_the_stage_fit() -> None:
    m = FittedCostModel(profile())
    f = StageFit(**profile()["stages"][0])
    chunks = [ChunkShape(100, 50), ChunkShape(300, 20)]
    assert m.step_time(1, chunks) == pytest.approx(f.step_time([(100, 50), (300, 20)]))
    assert m.step_time(0, []) == 0.0 and m.transfer_time(0, 100) == 0.0


def test_sim_runs_on_a_fitted_profile(tmp_path: Path) -> None:
    path = tmp_path / "p.json"
    path.write_text(json.dumps(profile()))
    engine = SimEngine(SimConfig("tiny", "h200", 2, block_size=16, cost_profile=str(path)))
    assert engine.vocab_size == 512 and engine.capacities == [2000, 2000]
    cfg = BenchConfig(parse_workload("reuse90"), [4], ["wavepp"], 16, prompt_tokens=256)
    cfg.knobs = engine.default_knobs()
    rec = run_one(engine, cfg, "wavepp", 4)
    assert rec.figures.completed == 16 and rec.figures.input_tokens_per_s > 0
    with pytest.raises(ValueError, match="pp=2"):
        SimEngine(SimConfig("tiny", "h200", 3, cost_profile=str(path)))
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    with pytest.raises(ValueError, match="not a cost profile"):
        load_profile(bad)
    old = tmp_path / "old.json"
    old.write_text(json.dumps({**profile(), "format": "wavepp-cost-profile/1"}))
    with pytest.raises(ValueError, match=r"older format \(wavepp-cost-profile/1; this release reads "
                                         r"wavepp-cost-profile/2\): make a new one with `wavepp calibrate "):
        load_profile(old)


def test_calibrating_a_small_torch_model(tmp_path: Path) -> None:
    from wavepp.runtime.engines.config import TorchConfig
    from wavepp.runtime.engines.torch.config import DecoderConfig
    from wavepp.runtime.engines.torch.engine import TorchEngine
    cfg = DecoderConfig(vocab_size=512, hidden_size=64, intermediate_size=128, num_layers=2, num_heads=4,
                        num_kv_heads=2, max_position=512)
    model = tmp_path / "config.json"
    model.write_text(json.dumps(cfg.to_hf_dict()))
    waves = wave_grid(512, 256, grid_l=(0, 128, 384), grid_x=(16, 64, 128), grid_n=(1, 2, 4))
    seen: list[tuple[int, int]] = []
    with TorchEngine(TorchConfig(str(model), pp=2, block_size=16, kv_blocks=[200])) as engine:
        prof = calibrate(engine, waves=waves, repeats=3,     # median of 3: a loaded machine's noise
                         progress=lambda done, total: seen.append((done, total)))
    # Its progress, wave by wave (`wavepp calibrate` draws it as a bar; it printed nothing for minutes)
    assert seen == [(i, 2 * len(waves)) for i in range(1, 2 * len(waves) + 1)]
    assert all(v >= 0 for f in prof["stages"] for v in f.values()), prof["stages"]   # a physical fit
    assert prof["format"] == FORMAT and prof["pp"] == 2 and prof["block_size"] == 16
    assert [len(s) for s in prof["samples"]] == [len(waves)] * 2
    assert all(t > 0 for stage in prof["samples"] for *_, t in stage)
    assert [[tuple(s[:3]) for s in stage] for stage in prof["samples"]] == [waves, waves]
    # The six coefficients of each stage reproduce its own samples (timing noise aside).
    assert all(med < 0.5 for med, _ in fit_error(prof))
    path = tmp_path / "prof.json"
    save_profile(path, prof)
    sim = SimEngine(SimConfig(str(model), "h200", 2, block_size=16, cost_profile=str(path)))
    assert sim.capacities == [200, 200]
    with TorchEngine(TorchConfig(str(model), pp=2, block_size=16, kv_blocks=[2])) as small:
        with pytest.raises(ValueError, match="stage 0 has 2 blocks"):
            calibrate(small, waves=waves, repeats=1)
