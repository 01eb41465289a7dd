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


@pytest.fixture(scope="session")
def knob_change_store() -> Iterator[str]:
    """A store holding a finished real-time sim run whose wave budget was halved midway through the
    dashboard's own write path (the Knobs page's): before/after windows to compare."""
    import threading
    import time
    import uuid

    import redis

    from dashboard.knob_form import parse
    from dashboard.sources import StoreSource
    from runtime.knobs import Knobs
    from telemetry import names as N

    cluster = f"knobchange-{uuid.uuid4().hex[:8]}"
    url = f"redis://127.0.0.1:6379/13?cluster={cluster}"
    engine = SimEngine("llama-3-8b", "h200", 4, kv_blocks=[4000], store_url=url, realtime=True, time_scale=3.0)
    cfg = BenchConfig(parse_workload("suffix:2048"), [32], ["wavepp"], 160, prompt_tokens=4096)
    thread = threading.Thread(target=lambda: run_one(engine, cfg, "wavepp", 32))
    thread.start()
    source = StoreSource(url)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        snap = source.snapshot()
        if sum(1 for s in snap.spans if s["n"] == N.WAVE_PLAN) >= 40 and snap.knobs is not None:
            break
        time.sleep(0.05)
    changes, errors = parse({"max_wave_tokens": "8192", "min_wave_tokens": "4096"}, Knobs(**snap.knobs.values))
    assert not errors
    # In a thread of its own: the write runs an asyncio loop, and a browser test's playwright may hold
    # this thread's.
    writer = threading.Thread(target=lambda: source.write_knobs(changes))
    writer.start()
    writer.join(30)
    thread.join(120)
    yield url
    client = redis.Redis(db=13)
    keys = list(client.scan_iter(match=f"wavepp:{{{cluster}}}:*"))
    if keys:
        client.delete(*keys)
