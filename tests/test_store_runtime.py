"""The runtime with its shared store: knobs from the store, plans, and surviving a Redis restart."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest
import redis

from runtime.bench import BenchConfig, run_one
from runtime.engines.sim.clock import run_virtual
from runtime.engines.sim.engine import SimEngine
from runtime.loop import PipelineLoop
from runtime.workloads import Workload, parse_workload
from store.redis_store import RedisStore
from telemetry import names as N


def test_a_knob_written_to_the_store_reaches_the_next_waves() -> None:
    """An operator's knobs_set (dashboard path) is picked up by the watcher and applied at a wave boundary."""
    engine = SimEngine("llama-3-8b", "h200", 4, kv_blocks=[4000])
    parts = engine.build()
    tel = engine.telemetry()
    workload = Workload(parse_workload("suffix:2048"), 96, 2048, 64, engine.vocab_size, 0)
    cfg = BenchConfig(parse_workload("suffix:2048"), [32], ["wavepp"], 96)
    seen: dict[str, int] = {}

    async def main() -> None:
        store = await engine.open_store()
        loop = PipelineLoop(parts.handles, parts.executor, store, cfg.knobs, workload, 32, tel, 64)
        run = asyncio.create_task(loop.run())
        while loop.next_wave_id < 10:
            await asyncio.sleep(0.001)
        record = await store.knobs_set({"max_wave_tokens": 2048, "min_wave_tokens": 1024})
        seen["version"] = record.version
        seen["wave_at_write"] = loop.next_wave_id
        await run

    run_virtual(main())
    plans = sorted((s for s in tel.finished_spans() if s.name == N.WAVE_PLAN), key=lambda s: s.start_time or 0)
    marked = [s for s in plans if any(e.name == N.EVENT_KNOBS for e in s.events)]
    assert len(marked) == 1
    after = [s.attributes.get(N.BUDGET) for s in plans if (s.start_time or 0) >= (marked[0].start_time or 0)]
    assert max(b for b in after if b) <= 2048                      # type: ignore[type-var]
    # Within one wave of the write: the change lands no later than two waves after it.
    assert int(marked[0].attributes[N.WAVE_ID]) <= seen["wave_at_write"] + 2  # type: ignore[arg-type, index]


def test_plans_are_published_and_none_stays_in_flight() -> None:
    engine = SimEngine("llama-3-8b", "h200", 2, kv_blocks=[4000])
    cfg = BenchConfig(parse_workload("reuse90"), [8], ["wavepp"], 32, prompt_tokens=2048)
    rec = run_one(engine, cfg, "wavepp", 8)
    store = rec.parts.store.inner   # type: ignore[attr-defined]

    async def read() -> tuple[list[dict], list[dict]]:
        return await store.plans_recent(10_000), await store.plans_in_flight()

    recent, in_flight = asyncio.run(read())
    assert in_flight == []
    plan_spans = {int(s.attributes[N.WAVE_ID]): s for s in rec.spans  # type: ignore[arg-type, index]
                  if s.name == N.WAVE_PLAN and s.attributes.get(N.WAVE_ID) is not None}  # type: ignore[union-attr]
    assert [p["wave"] for p in recent] == sorted(plan_spans)
    for p in recent:
        assert [c["request"] for c in p["chunks"]] == list(plan_spans[p["wave"]].attributes[N.REQUEST_IDS])  # type: ignore[index]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _start_redis(port: int, workdir: Path) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                             "--appendonly", "no", "--dir", str(workdir)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    client = redis.Redis(port=port, socket_connect_timeout=0.2)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            if client.ping():
                return proc
        except redis.RedisError:
            time.sleep(0.05)
    proc.kill()
    raise RuntimeError("redis-server did not start")


def test_redis_restart_mid_run_loses_no_request_and_the_index_is_rebuilt(tmp_path: Path) -> None:
    """Kill Redis while requests run, start it again (empty): every request completes and the hint
    index equals the stages' own trees afterwards."""
    port = _free_port()
    server = {"proc": _start_redis(port, tmp_path)}
    url = f"redis://127.0.0.1:{port}/0?cluster=restart"
    engine = SimEngine("llama-3-8b", "h200", 2, kv_blocks=[3000], store_url=url, realtime=True, time_scale=4.0)
    cfg = BenchConfig(parse_workload("reuse90"), [8], ["wavepp"], 96, prompt_tokens=2048)
    restarted = threading.Event()

    def bounce() -> None:
        server["proc"].kill()
        server["proc"].wait()
        time.sleep(0.4)                                   # the runtime keeps running without Redis
        server["proc"] = _start_redis(port, tmp_path)
        restarted.set()

    def progress(label: str, done: int, total: int) -> None:
        if done == 24 and not restarted.is_set():
            threading.Thread(target=bounce, daemon=True).start()

    try:
        rec = run_one(engine, cfg, "wavepp", 8, progress)
        assert restarted.is_set(), "the run ended before Redis was restarted (make it longer)"
        assert rec.figures.completed == 96 and rec.figures.failed == 0
        assert rec.parts.store.outages >= 1 and rec.parts.store.rebuilds >= 1  # type: ignore[attr-defined]

        async def counts() -> list[int]:
            store = await RedisStore.connect(url)
            try:
                return [await store.hint_count(h.stage) for h in rec.parts.handles]
            finally:
                await store.close()

        assert asyncio.run(counts()) == [h.cache.pool.num_cached for h in rec.parts.handles]
    finally:
        server["proc"].kill()
        server["proc"].wait()


@pytest.mark.parametrize("url", ["redis://127.0.0.1:1/0"])
def test_unreachable_store_at_start_is_one_line(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    from runtime.cli import main
    assert main(["bench", "--store", url, "--quiet", "--requests", "4", "--concurrency", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "cannot reach redis" in err[0]
