"""The autopilot on the torch engine replays with the engine's calibration: the profile travels from the
engine's config into the run's meta, from which the autopilot's predictor (and Preview of a saved run) builds
the simulator; a server refuses at start a profile it could not replay with."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import wavepp.runtime.autopilot.predict as predict
from tests.autopilot.test_predict import spans
from tests.test_whatif import profile
from wavepp.runtime.autopilot.settings import AutopilotSettings
from wavepp.runtime.autopilot.window import WindowFigures, WorkloadStats
from wavepp.runtime.control.knobs import Knobs
from wavepp.runtime.engines.config import TorchConfig
from wavepp.runtime.engines.torch.engine import TorchEngine
from wavepp.runtime.runs.meta import describe_run
from wavepp.runtime.runs.runfile import RunInfo
from wavepp.runtime.serve.config import resolve
from wavepp.runtime.serve.runtime import engine_config


def written(tmp_path: Path, pp: int) -> str:
    path = tmp_path / f"profile-pp{pp}.json"
    path.write_text(json.dumps(profile(pp)))
    return str(path)


def test_a_torch_runs_meta_names_its_calibration(tmp_path: Path) -> None:
    path = written(tmp_path, 2)
    run = RunInfo.new("wavepp", "reuse90", 4, "torch", "memory")
    engine = TorchEngine(TorchConfig("tiny-llama", 2, kv_blocks=[64], sim_profile=path))
    assert describe_run(engine, run, Knobs(), [64, 64])["sim"] == {"cost_profile": path}
    bare = TorchEngine(TorchConfig("tiny-llama", 2, kv_blocks=[64]))
    assert "sim" not in describe_run(bare, run, Knobs(), [64, 64])


def search_spec(monkeypatch: pytest.MonkeyPatch, meta: dict[str, Any]) -> tuple[Any, str]:
    """What the predictor hands Suggest for a window of the run ``meta`` describes (the spec), or its note."""
    seen: list[Any] = []

    def fake_suggest(replay: Any, spec: Any, *args: Any, **kwargs: Any) -> Any:
        seen.append(spec)
        raise predict.WhatIfError("stop here")
    monkeypatch.setattr(predict, "suggest", fake_suggest)
    window = WindowFigures(0, 0, 50 * 10**9, 1.0, 0.5, None, None, 40, 0, WorkloadStats(40, 4096.0, 0.0, 1.0))
    search = predict.suggest_predictor(meta, lambda: spans(4))(window, Knobs(), AutopilotSettings(mode="on"))
    return (seen[0] if seen else None), search.note


def test_the_autopilot_replays_a_torch_run_with_its_calibration(monkeypatch: pytest.MonkeyPatch,
                                                                 tmp_path: Path) -> None:
    path = written(tmp_path, 4)
    meta = {"concurrency": 4, "workload": "reuse90", "engine": "torch", "model": "tiny-llama", "hardware": "cpu",
            "pp": 4, "block_size": 64, "capacities": [3000] * 4}
    spec, note = search_spec(monkeypatch, {**meta, "sim": {"cost_profile": path}})
    assert spec.cost_profile == path and spec.clock == "cpu"       # real time: replayed on the CPU clock
    spec, note = search_spec(monkeypatch, meta)
    assert spec is None and "no calibration" in note and "wavepp calibrate --engine torch" in note


def test_a_server_refuses_a_calibration_of_other_stages(tmp_path: Path) -> None:
    path = written(tmp_path, 2)
    with pytest.raises(ValueError, match=r"--sim-profile: the cost profile .* was measured with pp=2; the run has 4"):
        engine_config(resolve({"engine": "torch", "pp": 4, "sim_profile": path}, environ={}))
    config = engine_config(resolve({"engine": "torch", "pp": 2, "sim_profile": path}, environ={}))
    assert isinstance(config, TorchConfig) and config.sim_profile == str(Path(path).resolve())
