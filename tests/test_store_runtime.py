"""The runtime with its shared store: knobs from the store, plans, and surviving a Redis restart."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from pathlib import Path

import pytest
import redis

from tests.private_redis import PrivateRedis
from wavepp.runtime.bench.runs import BenchConfig, run_one
from wavepp.runtime.control.knobs import validated_values
from wavepp.runtime.engines.config import SimConfig
from wavepp.runtime.engines.sim.clock import run_virtual
from wavepp.runtime.engines.sim.engine import SimEngine
from wavepp.runtime.loop import LoopConfig, PipelineLoop
from wavepp.runtime.sources.workloads import Workload, parse_workload
from wavepp.store.records import StatusSnapshot, WavePlanRecord
from wavepp.store.redis_store import RedisStore
from wavepp.telemetry import names as N


def test_a_knob_written_to_the_store_reaches_the_next_waves() -> None:
    """An operator's knobs_set (dashboard path) is picked up by the watcher and applied at a wave boundary."""
    engine = SimEngine(SimConfig("llama-3-8b", "h200", 4, kv_blocks=[4000]))
    parts = engine.build()
    tel = engine.telemetry()
    workload = Workload(parse_workload("suffix:2048"), 96, 2048, 64, engine.vocab_size, 0)
    cfg = BenchConfig(parse_workload("suffix:2048"), [32], ["wavepp"], 96)
    seen: dict[str, int] = {}

    async def main() -> None:
        store = await engine.open_store()
        loop = PipelineLoop(parts, store, cfg.knobs, workload, tel, LoopConfig(32))
        run = asyncio.create_task(loop.run())
        while sum(1 for s in tel.finished_spans() if s.name == N.WAVE_PLAN) < 10:   # measured waves (not warm-up)
            await asyncio.sleep(0.001)
        record = await store.knobs_set({"max_wave_tokens": 2048, "min_wave_tokens": 1024}, validate=validated_values)
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
    engine = SimEngine(SimConfig("llama-3-8b", "h200", 2, kv_blocks=[4000]))
    cfg = BenchConfig(parse_workload("reuse90"), [8], ["wavepp"], 32, prompt_tokens=2048)
    rec = run_one(engine, cfg, "wavepp", 8)
    store = rec.parts.store.inner   # type: ignore[attr-defined]

    async def read() -> tuple[list[WavePlanRecord], list[WavePlanRecord]]:
        return await store.plans_recent(10_000), await store.plans_in_flight()

    recent, in_flight = asyncio.run(read())
    assert in_flight == []
    plan_spans = {int(s["a"][N.WAVE_ID]): s for s in rec.encoded
                  if s["n"] == N.WAVE_PLAN and s["a"].get(N.WAVE_ID) is not None}
    # The warm-up's waves (the primed prefixes: no span) come first, then every measured wave's plan.
    warm = [p for p in recent if p.wave not in plan_spans]
    assert warm and all(c.request.startswith("prime") for p in warm for c in p.chunks)
    assert [p.wave for p in recent[len(warm):]] == sorted(plan_spans)
    for p in recent[len(warm):]:
        assert [c.request for c in p.chunks] == list(plan_spans[p.wave]["a"][N.REQUEST_IDS])


def test_redis_restart_mid_run_loses_no_request_and_the_index_is_rebuilt(tmp_path: Path) -> None:
    """Kill Redis while requests run, start it again (empty): every request completes and the hint
    index equals the stages' own trees afterwards."""
    server = PrivateRedis(tmp_path)
    url = server.url("restart")
    engine = SimEngine(SimConfig("llama-3-8b", "h200", 2, kv_blocks=[3000], store_url=url, clock="wall",
                                 time_scale=4.0))
    cfg = BenchConfig(parse_workload("reuse90"), [8], ["wavepp"], 96, prompt_tokens=2048)
    try:
        rec = run_one(engine, cfg, "wavepp", 8, server.restart_when(24, 0.4))
        assert server.restarted.is_set(), "the run ended before Redis was restarted (make it longer)"
        assert rec.figures.completed == 96 and rec.figures.failed == 0
        assert rec.parts.store.outages >= 1 and rec.parts.store.rebuilds >= 1  # type: ignore[attr-defined]

        async def counts() -> list[int]:
            store = await RedisStore.connect(url)
            try:
                return [await store.hint_count(h.stage) for h in rec.parts.handles]
            finally:
                await store.close()

        assert asyncio.run(counts()) == [h.cache.pool.num_cached for h in rec.parts.handles]
        published = _published(server.port, "restart", rec.run.id)
        assert (published["meta"], published["label"]) == (rec.run.id, rec.run.label)
    finally:
        server.stop()


@pytest.mark.parametrize("url", ["redis://127.0.0.1:1/0"])
def test_unreachable_store_at_start_is_one_line(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    from wavepp.runtime.cli import main
    assert main(["bench", "--store", url, "--quiet", "--requests", "4", "--concurrency", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "cannot reach redis" in err[0]


def _status(url: str) -> StatusSnapshot | None:
    async def read() -> StatusSnapshot | None:
        store = await RedisStore.connect(url)
        try:
            return await store.status_get()
        finally:
            await store.close()
    return asyncio.run(read())


def test_an_invalid_record_written_mid_run_is_refused_and_the_run_completes() -> None:
    """Issue 14: another client writes a record the deployment cannot use (8200 tokens, block size 64),
    then one that is not JSON, then a key of the wrong type. The real-time run keeps its knobs,
    reports the refusal (status record, span event) and completes every request; a corrupt record is
    read as absent and the runtime writes its knobs back. Today the first write ends the run with
    KnobError at the next wave boundary."""
    redis_url = "redis://127.0.0.1:6379/13"                  # the shared test database, a cluster of its own
    url = f"{redis_url}?cluster=refuse-{time.monotonic_ns()}"
    prefix = f"wavepp:{{{url.partition('?cluster=')[2]}}}"
    engine = SimEngine(SimConfig("llama-3-8b", "h200", 2, kv_blocks=[3000], store_url=url, clock="wall",
                                 time_scale=4.0))
    cfg = BenchConfig(parse_workload("reuse90"), [8], ["wavepp"], 160, prompt_tokens=2048)
    client = redis.Redis.from_url(redis_url)
    seen: dict[str, object] = {}

    def vandal() -> None:
        version = int(client.hget(f"{prefix}:knobs", "version") or 0)
        bad = {**cfg.knobs.as_dict(), "max_wave_tokens": 8200}
        client.hset(f"{prefix}:knobs", mapping={"version": version + 1, "values": json.dumps(bad)})
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and not seen.get("refused"):
            status = _status(url)
            seen["refused"] = status.knobs_refused if status is not None else None
            time.sleep(0.05)
        for corrupt in (lambda: client.hset(f"{prefix}:knobs", "values", "{not json"),
                        lambda: client.delete(f"{prefix}:knobs") + client.set(f"{prefix}:knobs", "a string")):
            corrupt()
            deadline = time.monotonic() + 5                  # until the runtime wrote its knobs back
            while time.monotonic() < deadline and client.type(f"{prefix}:knobs") != b"hash" or \
                    client.hget(f"{prefix}:knobs", "values") == b"{not json":
                time.sleep(0.02)
        seen["done"] = True

    def progress(label: str, done: int, total: int) -> None:
        if done == 8 and "started" not in seen:
            seen["started"] = threading.Thread(target=vandal, daemon=True)
            seen["started"].start()                          # type: ignore[attr-defined]

    try:
        rec = run_one(engine, cfg, "wavepp", 8, progress)
        assert seen.get("done"), "the run ended before the record was corrupted (make it longer)"
        assert rec.figures.completed == 160 and rec.figures.failed == 0
        assert rec.loop.knob_changes == []                   # it ran with its own knobs throughout
        refused = seen["refused"]
        assert isinstance(refused, dict) and "max_wave_tokens: 8200 is not a multiple of the block size 64" \
            in refused["reason"]
        events = [e for s in rec.encoded for e in s.get("ev", ()) if e[0] == N.EVENT_KNOBS_REFUSED]
        assert events, "no span event for the refusal"
        record = asyncio.run(_knobs(url))
        assert record.values == cfg.knobs.as_dict() and record.note is None   # written back after the corruption
    finally:
        for key in client.scan_iter(match=f"{prefix}:*"):
            client.delete(key)
        client.close()


async def _knobs(url: str):  # type: ignore[no-untyped-def]
    store = await RedisStore.connect(url)
    try:
        return await store.knobs_get()
    finally:
        await store.close()


def test_knobs_survive_a_store_restart(tmp_path: Path) -> None:
    """Issue 17: a trtllm-pp run with its own wave budgets; Redis restarts empty mid-run. The runtime
    keeps its knobs and writes them back (today it silently switched to the defaults: policy wavepp,
    M 16384), and its record lists no knob change."""
    server = PrivateRedis(tmp_path)
    url = server.url("restart-knobs")
    engine = SimEngine(SimConfig("llama-3-8b", "h200", 2, kv_blocks=[3000], store_url=url, clock="wall",
                                 time_scale=4.0))
    cfg = BenchConfig(parse_workload("reuse90"), [8], ["trtllm-pp"], 160, prompt_tokens=2048)
    cfg.knobs = cfg.knobs.replace(max_wave_tokens=4096, min_wave_tokens=2048)
    try:
        rec = run_one(engine, cfg, "trtllm-pp", 8, server.restart_when(16, 0.3))
        assert server.restarted.is_set(), "the run ended before Redis was restarted (make it longer)"
        assert rec.parts.store.outages >= 1                    # type: ignore[attr-defined]
        assert rec.figures.completed == 160
        assert rec.loop.knob_changes == []
        assert {s.policy for s in rec.loop.status} == {"trtllm-pp"}
        expected = cfg.knobs.replace(policy="trtllm-pp").as_dict()
        assert rec.meta["knobs"] == expected
        record = asyncio.run(_knobs(url))
        assert record.version >= 1 and record.values == expected
        assert record.deployment is not None and record.deployment.block_size == 64
    finally:
        server.stop()


REPUBLISHED_WITHIN_S = 5.0       # the reconnect backoff reaches 2 s at most


def _published(port: int, cluster: str, run_id: str) -> dict[str, object]:
    """What a viewer of the store finds of run ``run_id``: its description, its label, the knobs'
    version and the deployment (None where absent, or while the server does not answer)."""
    client = redis.Redis(port=port, socket_timeout=0.5, socket_connect_timeout=0.5)
    prefix = f"wavepp:{{{cluster}}}"
    try:
        meta = client.hget(f"{prefix}:runs:meta", run_id)
        label = client.hget(f"{prefix}:runs", run_id)
        version = client.hget(f"{prefix}:knobs", "version")
        deployment = client.get(f"{prefix}:deployment")
    except redis.RedisError:
        return {"meta": None, "label": None, "knobs": None, "deployment": None}
    finally:
        client.close()
    return {"meta": json.loads(meta)["run"]["id"] if meta else None, "label": label.decode() if label else None,
            "knobs": int(version) if version else None, "deployment": json.loads(deployment) if deployment else None}


def test_a_server_republishes_what_it_published_at_start_after_the_store_restarts_empty(tmp_path: Path) -> None:
    """Issue 23 item 9: Redis restarts empty under an idle server. Its run description and label
    (what the dashboard lists and replays the run from) come back within a few seconds, with the
    knobs and the deployment; today only the knobs and the deployment did."""
    from wavepp.runtime.control.knobs import Knobs
    from wavepp.runtime.serve.runtime import ServerRuntime

    server = PrivateRedis(tmp_path)
    engine = SimEngine(SimConfig("llama-3-8b", "h200", 2, kv_blocks=[2000], store_url=server.url("republish"),
                                 clock="wall"))
    rt = ServerRuntime(engine, Knobs(ring=3), max_queue=8)
    expected = {"meta": rt.run.id, "label": rt.run.label, "knobs": 1, "deployment": {"block_size": 64, "num_stages": 2}}
    seen: dict[str, object] = {}

    async def scenario() -> None:
        await rt.start()
        try:
            seen["start"] = _published(server.port, "republish", rt.run.id)
            await asyncio.to_thread(server.bounce, 0.3)
            deadline = time.monotonic() + REPUBLISHED_WITHIN_S
            while time.monotonic() < deadline:
                seen["after"] = _published(server.port, "republish", rt.run.id)
                if seen["after"] == expected:
                    break
                await asyncio.sleep(0.05)
        finally:
            await rt.stop()

    try:
        asyncio.run(scenario())
        assert seen["start"] == expected                 # the label too, before any span was exported
        assert seen["after"] == expected
    finally:
        server.stop()
