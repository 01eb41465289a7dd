"""Recorded data for the dashboard tests: a small bench of wavepp vs trtllm-pp saved to a file."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from runtime.bench import BenchConfig, run_one
from runtime.engines.sim.engine import SimEngine
from runtime.runfile import save_runs
from runtime.workloads import parse_workload

APP = str(Path(__file__).resolve().parents[2] / "dashboard" / "app.py")


@pytest.fixture(scope="session")
def saved_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    engine = SimEngine("llama-3-8b", "h200", 4, kv_blocks=[3000])
    cfg = BenchConfig(parse_workload("reuse90"), [16], ["wavepp", "trtllm-pp"], 96, prompt_tokens=4096)
    cfg.knobs = cfg.knobs.replace(max_wave_tokens=8192, min_wave_tokens=4096)
    records = [run_one(engine, cfg, p, 16) for p in cfg.policies]
    path = tmp_path_factory.mktemp("runs") / "bench.json.gz"
    save_runs(path, [r.saved() for r in records])
    return path


@pytest.fixture
def dashboard_env() -> Iterator[None]:
    """AppTest runs app.py in this process: restore the source variable afterwards."""
    old = os.environ.get("WAVEPP_DASHBOARD")
    yield
    if old is None:
        os.environ.pop("WAVEPP_DASHBOARD", None)
    else:
        os.environ["WAVEPP_DASHBOARD"] = old


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
