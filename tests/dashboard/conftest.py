"""Recorded data for the dashboard tests: a small bench of wavepp vs trtllm-pp saved to a file."""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from wavepp.dashboard.sources import Snapshot, StoreSource
from wavepp.runtime.bench.runs import BenchConfig, run_one
from wavepp.runtime.engines.config import SimConfig
from wavepp.runtime.engines.sim.engine import SimEngine
from wavepp.runtime.runs.runfile import save_runs
from wavepp.runtime.sources.workloads import parse_workload
from wavepp.telemetry import names as N

APP = str(Path(__file__).resolve().parents[2] / "dashboard" / "app.py")


@pytest.fixture(scope="session")
def saved_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    engine = SimEngine(SimConfig("llama-3-8b", "h200", 4, kv_blocks=[3000]))
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


def live_run(url: str, plans: int) -> tuple[threading.Thread, dict[str, Any], StoreSource, Snapshot]:
    """Start a real-time sim run (wavepp, 160 `suffix:2048` prompts of 4096 tokens at c=32) on the
    store at ``url`` in a thread, and wait until ``plans`` waves were planned and its knobs are in
    the store: (the thread, where it leaves its record under "rec", a source on the store, the
    snapshot then)."""
    engine = SimEngine(SimConfig("llama-3-8b", "h200", 4, kv_blocks=[4000], store_url=url, clock="wall",
                                 time_scale=3.0))
    cfg = BenchConfig(parse_workload("suffix:2048"), [32], ["wavepp"], 160, prompt_tokens=4096)
    out: dict[str, Any] = {}
    thread = threading.Thread(target=lambda: out.setdefault("rec", run_one(engine, cfg, "wavepp", 32)))
    thread.start()
    source = StoreSource(url)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        snap = source.snapshot()
        if sum(1 for s in snap.spans if s["n"] == N.WAVE_PLAN) >= plans and snap.knobs is not None:
            break
        time.sleep(0.05)
    return thread, out, source, snap


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def redis_cluster(prefix: str) -> Iterator[str]:
    """A store URL on the local Redis (db 13) under a cluster tag of its own; its keys deleted after."""
    import uuid

    import redis

    cluster = f"{prefix}-{uuid.uuid4().hex[:8]}"
    try:
        yield f"redis://127.0.0.1:6379/13?cluster={cluster}"
    finally:
        client = redis.Redis(db=13)
        keys = list(client.scan_iter(match=f"wavepp:{{{cluster}}}:*"))
        if keys:
            client.delete(*keys)
        client.close()


@pytest.fixture(scope="session")
def knob_change_store() -> Iterator[str]:
    """A store holding a finished real-time sim run whose wave budget was halved midway through the
    dashboard's own write path (the Knobs page's): before/after windows to compare."""
    from wavepp.dashboard.knob_form import parse
    from wavepp.runtime.control.knobs import Knobs

    with redis_cluster("knobchange") as url:
        thread, _, source, snap = live_run(url, 40)
        changes, errors = parse({"max_wave_tokens": "8192", "min_wave_tokens": "4096"},
                                Knobs(**snap.knobs.values))  # type: ignore[union-attr]
        assert not errors
        # In a thread of its own: the write runs an asyncio loop, and a browser test's playwright may
        # hold this thread's.
        writer = threading.Thread(target=lambda: source.write_knobs(changes))
        writer.start()
        writer.join(30)
        thread.join(120)
        yield url
