"""Runs are told apart: a unique id on every span and status record, one labelled run per id in a
store shared by several benches, and a bench that keeps a deployment's knobs unless told to reset."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import redis

from wavepp.dashboard.sources import StoreSource
from wavepp.runtime.bench.runs import BenchConfig, run_one
from wavepp.runtime.control.knobs import validated_values
from wavepp.runtime.engines.config import SimConfig
from wavepp.runtime.engines.sim.engine import SimEngine
from wavepp.runtime.sources.workloads import parse_workload
from wavepp.store.redis_store import RedisStore

WAVEPP = Path(sys.executable).parent / "wavepp"
SMALL = ["bench", "--model", "llama-3-8b", "--hardware", "h200", "--pp", "2", "--concurrency", "4",
         "--requests", "8", "--prompt-tokens", "2048", "--quiet", "--policy", "wavepp"]


def fresh_url() -> str:
    return f"redis://127.0.0.1:6379/13?cluster=runs-{uuid.uuid4().hex[:8]}"


def small_run(url: str, policy: str = "wavepp") -> object:
    engine = SimEngine(SimConfig("llama-3-8b", "h200", 2, kv_blocks=[2000], store_url=url))
    cfg = BenchConfig(parse_workload("reuse90"), [4], [policy], 8, prompt_tokens=2048)
    return run_one(engine, cfg, policy, 4)


def drop(url: str) -> None:
    client = redis.Redis(db=13)
    cluster = url.split("cluster=")[1]
    keys = list(client.scan_iter(match=f"wavepp:{{{cluster}}}:*"))
    if keys:
        client.delete(*keys)


def test_every_span_and_status_record_carries_the_run_id() -> None:
    """Two runs with the same policy and concurrency get different ids, each on all of its spans and
    status records; the saved run and its label carry them too."""
    url = fresh_url()
    try:
        a, b = small_run(url), small_run(url)
        assert a.run.id != b.run.id                                                  # type: ignore[attr-defined]
        for rec in (a, b):
            run = rec.run                                                            # type: ignore[attr-defined]
            assert {s.get("run") for s in rec.encoded} == {run.id}                   # type: ignore[attr-defined]
            assert rec.loop.status and {s.run for s in rec.loop.status} == {run.id}  # type: ignore[attr-defined]
            assert rec.loop.status[-1].state == "finished"                           # type: ignore[attr-defined]
            saved = rec.saved()                                                      # type: ignore[attr-defined]
            assert saved.id == run.id
            for part in ("wavepp", "reuse90", "c=4", "sim", "redis://", "Z"):       # policy … start time
                assert part in saved.label, saved.label
    finally:
        drop(url)


def test_a_store_shared_by_two_benches_shows_two_runs_never_merged() -> None:
    """Today the second bench's spans joined the first "run" (same label): one run, a time axis over
    both, the other run's status. Now the dashboard lists both by id and shows the newest by default."""
    url = fresh_url()
    try:
        first, second = small_run(url, "wavepp"), small_run(url, "wavepp")
        snap = StoreSource(url).snapshot()
        ids = [first.run.id, second.run.id]                                          # type: ignore[attr-defined]
        assert list(snap.runs) == ids
        assert snap.runs[ids[0]] == first.run.label                                  # type: ignore[attr-defined]
        assert snap.run_id == ids[1]                                                 # the newest run
        assert len(snap.spans) == len(second.encoded)                                # type: ignore[attr-defined]
        assert all(s["run"] == ids[1] for s in snap.spans)
        assert snap.status and all(s.run == ids[1] for s in snap.status)
        older = StoreSource(url).snapshot(ids[0])
        assert len(older.spans) == len(first.encoded) and not older.status         # type: ignore[attr-defined]
    finally:
        drop(url)


def test_a_run_describes_itself_in_the_store_from_its_start_and_the_store_source_reads_it() -> None:
    """Today a live store held no engine description: the dashboard could not preview its runs. Now each
    run publishes its saved meta (engine, model, hardware, stages, workload, knobs, sim arguments) when it
    starts, and the store source gives it for the run shown, per run."""
    url = fresh_url()
    cluster = url.split("cluster=")[1]
    client = redis.Redis(db=13)
    seen_mid_run: list[dict] = []

    def progress(label: str, done: int, total: int) -> None:
        if done == 1:                              # the run is going: its description is already there
            ids = [k.decode() for k in client.hkeys(f"wavepp:{{{cluster}}}:runs:meta")]
            seen_mid_run.extend(json.loads(client.hget(f"wavepp:{{{cluster}}}:runs:meta", i)) for i in ids)

    try:
        engine = SimEngine(SimConfig("llama-3-8b", "h200", 2, kv_blocks=[2000, 1500], store_url=url, time_scale=2.0))
        cfg = BenchConfig(parse_workload("reuse90"), [4], ["wavepp"], 8, prompt_tokens=2048)
        first = run_one(engine, cfg, "wavepp", 4, progress)
        other = BenchConfig(parse_workload("suffix:1024"), [2], ["trtllm-pp"], 8, prompt_tokens=2048)
        second = run_one(engine, other, "trtllm-pp", 2)
        assert [m["run"]["id"] for m in seen_mid_run] == [first.run.id]
        source = StoreSource(url)
        for rec in (first, second):
            saved = json.loads(json.dumps(rec.meta))
            del saved["spans"], saved["spans_dropped"], saved["working_set_tokens"]  # counted when it ended
            meta = source.run_meta(source.snapshot(rec.run.id))
            assert meta == saved
        assert meta["engine"] == "sim" and meta["policy"] == "trtllm-pp" and meta["workload"] == "suffix:1024"
        assert meta["pp"] == 2 and meta["concurrency"] == 2
        assert meta["capacities"] == [1500, 1500]    # trtllm-pp's pool (pool=min): the smallest stage's, on every stage
        assert meta["sim"]["model"] == "llama-3-8b" and meta["sim"]["hardware"] == "h200"
        assert meta["sim"]["time_scale"] == 2.0
    finally:
        client.close()
        drop(url)


def test_a_server_describes_its_run_in_the_store_when_it_starts() -> None:
    """`wavepp serve` publishes the same description: an open-loop run of the engine it serves."""
    from wavepp.runtime.control.knobs import Knobs
    from wavepp.runtime.serve.runtime import ServerRuntime

    url = fresh_url()
    engine = SimEngine(SimConfig("llama-3-8b", "h200", 2, kv_blocks=[2000, 1800], store_url=url, clock="wall",
                                 time_scale=5.0))
    server = ServerRuntime(engine, Knobs(ring=3), max_queue=8)

    async def started() -> dict | None:
        await server.start()
        try:
            assert server.store is not None
            return await server.store.run_meta_get(server.run.id)
        finally:
            await server.stop()

    try:
        meta = asyncio.run(started())
        assert meta is not None
        assert meta["run"]["id"] == server.run.id and meta["engine"] == "sim" and meta["workload"] == "serve"
        assert meta["concurrency"] == 0 and meta["pp"] == 2 and meta["capacities"] == [2000, 1800]
        assert meta["model"] == "llama-3-8b" and meta["hardware"] == "h200" and meta["knobs"]["ring"] == 3
        assert meta["sim"]["time_scale"] == 5.0
    finally:
        drop(url)


def knobs_version_and_history(url: str) -> tuple[int, list[dict]]:
    async def read() -> tuple[int, list[dict]]:
        store = await RedisStore.connect(url)
        try:
            return (await store.knobs_get()).version, await store.knobs_history(100)
        finally:
            await store.close()
    return asyncio.run(read())


def set_knobs(url: str, changes: dict) -> None:
    async def write() -> None:
        store = await RedisStore.connect(url)
        try:
            await store.knobs_set(changes, validate=validated_values)
        finally:
            await store.close()
    asyncio.run(write())


def bench(url: str, *extra: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    return subprocess.run([str(WAVEPP), *SMALL, "--store", url, *extra], capture_output=True, text=True,
                          timeout=120, env=env)


def test_a_bench_keeps_the_deployments_knobs_and_says_what_it_cleared() -> None:
    """Today every bench deleted the knobs and their history; now it keeps them, clears the run state,
    and says so in one line; --reset-store clears the knobs too."""
    url = fresh_url()
    try:
        set_knobs(url, {"ring": 3})
        proc = bench(url)
        assert proc.returncode == 0, proc.stderr
        line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("store "))
        assert "cleared" in line and "kept the knobs (version 1)" in line and "--reset-store" in line, line
        _, history = knobs_version_and_history(url)
        assert history[0]["version"] == 1 and history[0]["changes"] == {"ring": 3}
        client = redis.Redis(db=13)
        described = f"wavepp:{{{url.split('cluster=')[1]}}}:runs:meta"
        [first_run] = client.hkeys(described)

        proc = bench(url, "--reset-store")
        assert proc.returncode == 0, proc.stderr
        line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("store "))
        assert "--reset-store cleared" in line and "knobs" in line, line
        _, history = knobs_version_and_history(url)
        assert {"ring": 3} not in [h["changes"] for h in history]                  # the old history is gone
        assert history[0]["version"] == 1                                            # the bench's own, from 1
        [second_run] = client.hkeys(described)                                       # the first run's is gone
        assert second_run != first_run
        client.close()
    finally:
        drop(url)


def test_a_bench_that_keeps_the_knobs_runs_with_them(tmp_path: Path) -> None:
    """Knobs written for the next run (a finished run's dashboard, `wavepp knobs`) are the ones it
    starts with - the bench said it kept version 2, then ran with other values and wrote version 3
    - and a knob flag given on the command line goes over them, said so."""
    url = fresh_url()
    try:
        set_knobs(url, {"ring": 3, "max_leases": 512})
        out = tmp_path / "b.json"
        proc = bench(url, "--json", str(out))
        assert proc.returncode == 0, proc.stderr
        line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("store "))
        assert "kept the knobs (version 1)" in line and "the runs start with the kept knobs" in line, line
        knobs = json.loads(out.read_text())["runs"][0]["knobs"]
        assert knobs["ring"] == 3 and knobs["max_leases"] == 512, knobs
        assert knobs_version_and_history(url)[0] == 1              # nothing else was written over them

        proc = bench(url, "--ring", "2", "--json", str(out))
        assert proc.returncode == 0, proc.stderr
        line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("store "))
        assert "(with ring=2 from the command line)" in line, line
        knobs = json.loads(out.read_text())["runs"][0]["knobs"]
        assert knobs["ring"] == 2 and knobs["max_leases"] == 512, knobs
    finally:
        drop(url)


def test_a_run_that_fails_says_so_in_its_last_status_record() -> None:
    """A viewer tells a crashed runtime from a finished one by the last status record's state."""
    from wavepp.runtime.engines.sim.clock import run_virtual
    from wavepp.runtime.loop import LoopConfig, PipelineLoop
    from wavepp.runtime.runs.runfile import RunInfo
    from wavepp.runtime.sources.workloads import Workload

    engine = SimEngine(SimConfig("llama-3-8b", "h200", 2, kv_blocks=[2000]))
    parts = engine.build()
    run = RunInfo.new("wavepp", "reuse90", 4, "sim", "memory")
    tel = engine.telemetry(run)
    calls = {"n": 0}
    execute = parts.executor.execute

    async def dying(stage: int, *args: object) -> object:
        calls["n"] += 1
        if calls["n"] > 6:
            raise RuntimeError("stage 1 exited with -9")
        return await execute(stage, *args)  # type: ignore[arg-type]
    parts.executor.execute = dying  # type: ignore[method-assign]
    workload = Workload(parse_workload("reuse90"), 16, 2048, 64, engine.vocab_size, 0)
    holder: dict[str, PipelineLoop] = {}

    async def main() -> None:
        store = await engine.open_store()
        holder["loop"] = PipelineLoop(parts, store, engine.default_knobs(), workload, tel, LoopConfig(4))
        await holder["loop"].run()

    try:
        run_virtual(main())
    except RuntimeError as exc:
        assert "exited with -9" in str(exc)
    else:
        raise AssertionError("the run should have failed")
    last = holder["loop"].result.status[-1]
    assert last.run == run.id and last.state == "failed: stage 1 exited with -9"


def test_a_server_run_is_labelled_open_loop_not_c0() -> None:
    from wavepp.runtime.runs.runfile import RunInfo
    label = RunInfo.new("wavepp", "serve", 0, "torch", "memory").label
    assert label.startswith("wavepp serve open loop · torch · memory · ") and "c=0" not in label
    assert " c=16 · " in RunInfo.new("wavepp", "reuse90", 16, "sim", "memory").label
