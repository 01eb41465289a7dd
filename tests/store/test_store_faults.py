"""Store faults: a store that never comes back, keys another client corrupted, a URL that is not
Redis. Each ends in one line or is healed; none hangs (subprocesses run under a timeout)."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis

from wavepp.runtime.bench.runs import BenchConfig, run_one
from wavepp.runtime.cli import main
from wavepp.runtime.engines.config import SimConfig
from wavepp.runtime.engines.sim.engine import SimEngine
from wavepp.runtime.sources.workloads import parse_workload
from wavepp.store.base import RegistryEntry
from wavepp.store.records import WavePlanRecord
from wavepp.store.redis_store import RedisStore
from wavepp.store.resilient import ResilientStore, StoreGone, StoreUnavailable

WAVEPP = Path(sys.executable).parent / "wavepp"
StartRedis = Callable[..., tuple[subprocess.Popen[bytes], int]]


class _Down:
    """A store whose server is gone for good."""

    async def hint_count(self, stage: int) -> int:
        raise StoreUnavailable("redis unavailable: Connection refused")


def test_resilient_store_gives_up_after_its_deadline() -> None:
    """Retries with backoff until the deadline, then one StoreGone naming it - never forever."""
    async def call() -> float:
        store = ResilientStore(_Down(), initial_backoff_s=0.01, max_backoff_s=0.05, deadline_s=0.3)
        t0 = time.monotonic()
        with pytest.raises(StoreGone, match=r"deadline 0.3 s, --store-deadline\): redis unavailable"):
            await store.hint_count(0)
        return time.monotonic() - t0

    assert 0.3 <= asyncio.run(asyncio.wait_for(call(), timeout=5)) < 2


def _bench_losing_its_store(start_private_redis: StartRedis, *flags: str) -> tuple[int, str]:
    """Start a long bench on a private Redis, kill the server once the run is going and never
    restart it; the bench's exit code and stderr (it must end within 15 s of the kill)."""
    server, port = start_private_redis()
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    proc = subprocess.Popen([str(WAVEPP), "bench", "--model", "llama-3-8b", "--hardware", "h200", "--pp", "2",
                             "--workload", "reuse90", "--prompt-tokens", "2048", "--concurrency", "4",
                             "--requests", "100000", "--quiet", "--store", f"redis://127.0.0.1:{port}/0", *flags],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        client = redis.Redis(port=port, socket_timeout=1)
        deadline = time.monotonic() + 60
        while not client.exists("wavepp:{default}:status") and time.monotonic() < deadline:  # the run is going
            time.sleep(0.2)
        server.kill()
        server.wait()
        killed = time.monotonic()
        _, err = proc.communicate(timeout=30)
        assert time.monotonic() - killed < 15
    finally:
        proc.kill()
        proc.wait()
    return proc.returncode, err


@pytest.mark.parametrize("policy", ["wavepp", "trtllm-pp"])
def test_a_store_that_never_returns_ends_a_realtime_bench(policy: str, start_private_redis: StartRedis) -> None:
    """Redis killed mid-run and never restarted: the bench ends after --store-deadline with one
    error line (exit 1), for both policies; it used to retry forever."""
    rc, err = _bench_losing_its_store(start_private_redis, "--policy", policy, "--realtime", "--store-deadline", "2")
    lines = err.splitlines()
    assert "Traceback" not in err and rc == 1, err
    assert lines[-1].startswith("wavepp: error: store: unreachable for 2 s (deadline 2 s, --store-deadline)"), err
    assert len(lines) <= 3, err     # plus at most the outage warning and the span stream's, once each


def test_a_store_that_goes_away_ends_a_virtual_time_bench(start_private_redis: StartRedis) -> None:
    """In virtual time the loop cannot wait out an outage: the run ends at once, the error line last."""
    rc, err = _bench_losing_its_store(start_private_redis, "--policy", "wavepp")
    lines = err.splitlines()
    assert "Traceback" not in err and rc == 1, err
    assert lines[-1].startswith("wavepp: error: store: redis unavailable"), err
    assert len(lines) <= 3, err     # plus at most a failed store write and the span stream, once each


@pytest.fixture
def corrupt(redis_store_url: str) -> Iterator[tuple[str, Callable[[], None]]]:
    """The URL of a fresh deployment and a function that writes wrong types under its keys."""
    cluster = redis_store_url.split("cluster=")[1]
    client = redis.Redis.from_url(redis_store_url.split("?")[0])

    def write() -> None:
        k = f"wavepp:{{{cluster}}}:"
        client.delete(*(k + n for n in ("hint:0", "hint:stages", "registry:entries", "registry:holders", "plans",
                                        "plans:in_flight", "runs:meta")))
        client.set(k + "hint:0", "garbage")
        client.rpush(k + "hint:stages", "x")
        client.set(k + "registry:entries", "garbage")
        client.hset(k + "registry:holders", "x", "y")
        client.set(k + "plans", "garbage")
        client.rpush(k + "plans:in_flight", "x")
        client.set(k + "runs:meta", "garbage")

    yield redis_store_url, write
    client.close()


def test_corrupted_keys_are_healed_and_reported_once(corrupt: tuple[str, Callable[[], None]],
                                                     caplog: pytest.LogCaptureFixture) -> None:
    """Wrong Redis types under hint/registry/plans/run description keys: every call works (the key is deleted and
    treated as absent), with one warning line per key - no WRONGTYPE traceback."""
    url, write = corrupt

    async def body() -> None:
        store = await RedisStore.connect(url)
        try:
            write()
            await store.hint_update_many([(0, [1, 2], [])])
            assert (await store.hint_lookup([[1, 2]], [0]))[0].per_stage == (2,)
            entry = RegistryEntry("r1", "me", (0, 1), 2, 3)
            await store.registry_put([entry], 10)
            await store.registry_refresh("me", 10)
            assert await store.registry_entries() == [entry]
            await store.plan_publish(WavePlanRecord(1))
            assert await store.plans_in_flight() == [WavePlanRecord(1)]
            assert await store.plans_recent(5) == [WavePlanRecord(1)]
            assert await store.run_meta_get("r") is None
            await store.run_meta_put("r", {"engine": "sim"})
            assert await store.run_meta_get("r") == {"engine": "sim"}
            write()                                   # the same keys again: healed, not reported twice
            await store.hint_update_many([(0, [1], [])])
            await store.plan_publish(WavePlanRecord(2))
        finally:
            await store.close()

    with caplog.at_level(logging.WARNING, logger="wavepp.store.redis_store"):
        asyncio.run(body())
    warnings = [r.getMessage() for r in caplog.records if r.name == "wavepp.store.redis_store"]
    for key in ("hint:0", "hint:stages", "registry:entries", "registry:holders", "plans", "plans:in_flight",
                "runs:meta"):
        assert sum(m.split(" ")[1].endswith(f"}}:{key}") for m in warnings) == 1, (key, warnings)


def test_malformed_entries_are_skipped(corrupt: tuple[str, Callable[[], None]]) -> None:
    """A registry entry, an in-flight plan or a run description another client wrote as garbage is
    ignored, not a crash."""
    url, _ = corrupt
    cluster = url.split("cluster=")[1]
    client = redis.Redis.from_url(url.split("?")[0])

    async def body() -> None:
        store = await RedisStore.connect(url)
        try:
            await store.registry_put([RegistryEntry("r1", "me", (0,), 1, 1)], 10)
            client.hset(f"wavepp:{{{cluster}}}:registry:entries", "bad", "not|an|entry")
            client.hset(f"wavepp:{{{cluster}}}:plans:in_flight", "7", "{not json")
            client.hset(f"wavepp:{{{cluster}}}:runs:meta", "bad", "{not json")
            client.hset(f"wavepp:{{{cluster}}}:runs:meta", "list", "[1, 2]")
            assert [e.request_id for e in await store.registry_entries()] == ["r1"]
            assert await store.plans_in_flight() == []
            assert await store.run_meta_get("bad") is None and await store.run_meta_get("list") is None
        finally:
            await store.close()

    asyncio.run(body())
    client.close()


def test_a_run_goes_on_through_corrupted_keys(corrupt: tuple[str, Callable[[], None]]) -> None:
    """Keys corrupted while a run uses the store: every request completes, the run never stops."""
    url, write = corrupt
    engine = SimEngine(SimConfig("llama-3-8b", "h200", 2, kv_blocks=[3000], store_url=url))
    cfg = BenchConfig(parse_workload("reuse90"), [4], ["wavepp"], 48, prompt_tokens=2048)
    writes = []

    def progress(label: str, done: int, total: int) -> None:
        if done in (8, 24):
            write()
            writes.append(done)

    rec = run_one(engine, cfg, "wavepp", 4, progress)
    assert writes == [8, 24]
    assert rec.figures.completed == 48 and rec.figures.failed == 0


@pytest.fixture
def http_port() -> Iterator[int]:
    """A TCP server that answers every request like a web server would."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen()
    stop = threading.Event()

    def serve() -> None:
        srv.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
            except TimeoutError:
                continue
            with conn:
                conn.recv(1024)
                conn.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield srv.getsockname()[1]
    stop.set()
    thread.join()
    srv.close()


@pytest.mark.parametrize("command", [["bench", "--quiet"], ["knobs"], ["admission-bench"]])
def test_a_store_url_that_is_not_redis_is_one_line(command: list[str], http_port: int,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*command, "--store", f"redis://127.0.0.1:{http_port}/0"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err == [f"wavepp: error: 127.0.0.1:{http_port}/0 is not a Redis server "
                   f"(it answered: Protocol Error: b'HTTP/1.1 400 Bad Request')"]

