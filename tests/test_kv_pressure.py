"""KV pressure: pools full of cached blocks never deadlock admission, and a stuck run says why.

Every run here goes through :func:`finishes_within`: a regression that hangs fails the test
after a wall-clock deadline instead of stalling the suite.
"""

from __future__ import annotations

import os
import random
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest

from wavepp.runtime.bench.runs import BenchConfig, RunRecord, run_one
from wavepp.runtime.engines.config import SimConfig
from wavepp.runtime.engines.sim.engine import SimEngine
from wavepp.runtime.kvcache.handle import Escrowed, StageHandle
from wavepp.runtime.kvcache.hashing import block_hashes, token_array
from wavepp.runtime.kvcache.priming import prime
from wavepp.runtime.kvcache.stage_cache import StageCache
from wavepp.runtime.sources.workloads import parse_workload

POLICIES = ["wavepp", "trtllm-pp"]
T = TypeVar("T")


def finishes_within(seconds: float, fn: Callable[[], T]) -> T:
    """Run ``fn`` in a daemon thread; fail the test if it has not returned after ``seconds``."""
    out: list[T] = []
    err: list[BaseException] = []

    def target() -> None:
        try:
            out.append(fn())
        except BaseException as exc:   # noqa: BLE001 - re-raised in the test's thread
            err.append(exc)

    t = threading.Thread(target=target, daemon=True)
    t.start()
    t.join(seconds)
    if t.is_alive():
        pytest.fail(f"run did not finish within {seconds:.0f} s (hang)")
    if err:
        raise err[0]
    return out[0]


def assert_clean(rec: RunRecord) -> None:
    for h in rec.parts.handles:
        assert h.cache.leases == {} and h.cache.tickets == {}, f"stage {h.stage} kept a lease or escrow"
        h.cache.check()


def test_a_round_drops_the_leases_behind_a_request_that_does_not_fit() -> None:
    """Two cached prefixes fill a 12-block pool; each request's lease pins the prefix the other's
    escrow would evict. In order, the first must still be admitted: the second's pins go first."""
    B = 4
    cache = StageCache(0, 12, B)
    prompts = []
    for seed in (1, 2):
        tokens = token_array([seed * 1000 + i for i in range(24)])     # 6 blocks each
        hashes = block_hashes(tokens, B)
        assert prime(cache, f"p{seed}", hashes, 24)
        prompts.append(hashes)
    assert cache.pool.num_free == 0 and cache.pool.num_cached == 12
    for rid, hashes in zip(("a", "b"), prompts, strict=True):   # each reuses 5 blocks, needs 7 more
        assert cache.lease(rid, hashes + [0] * 7, 5, 48) == 5
    # "a" needs 7 blocks; while "b" pins its prefix only the two unpinned leaves are reclaimable.
    assert cache.available_blocks() < 7
    assert cache.escrow_round([("a", 7), ("b", 7)]) == 1
    assert "a" in cache.tickets and "b" not in cache.leases and "b" not in cache.tickets
    cache.release("a")
    cache.check()


def pressure_engine(kv_blocks: list[int], pp: int = 4) -> SimEngine:
    return SimEngine(SimConfig("glm-5.2", "b300", pp, block_size=64, kv_blocks=kv_blocks))


@pytest.mark.parametrize("policy,kv_blocks", [("wavepp", 1200), ("trtllm-pp", 2000), ("trtllm-pp", 1200)])
def test_full_pools_of_cached_blocks_do_not_deadlock_admission(policy: str, kv_blocks: int) -> None:
    """The issue's runs: ~36K-token prompts (~576 blocks), pools that hold two, eight at a time."""
    cfg = BenchConfig(parse_workload("suffix4k"), [8], [policy], 48, 0)
    rec = finishes_within(120, lambda: run_one(pressure_engine([kv_blocks]), cfg, policy, 8))
    assert rec.figures.completed == 48 and rec.figures.failed == 0
    assert sum(rec.figures.evictions) > 0                                      # it had to evict to progress
    assert all(f <= h.cache.pool.num_evictions for f, h in zip(rec.figures.evictions, rec.parts.handles, strict=True))
    assert_clean(rec)


@pytest.mark.parametrize("seed", range(6))
def test_tight_and_uneven_pools_always_finish(seed: int) -> None:
    """Randomized: pools from one prompt's worth to a few, uneven across stages, any concurrency,
    both policies - every request completes (none can be refused: each fits every stage alone)."""
    rng = random.Random(seed)
    pp = rng.choice([2, 3, 4])
    prompt_blocks = 2048 // 64 + 4                                  # the longest prompts of the workload
    kv = [rng.randint(prompt_blocks, 4 * prompt_blocks) for _ in range(pp)]
    workload = rng.choice(["reuse90", "mixed", "suffix:256", "cold"])
    concurrency = rng.choice([1, 4, 8, 16])
    for policy in POLICIES:
        engine = SimEngine(SimConfig("llama-3-8b", "h200", pp, block_size=64, kv_blocks=kv))
        cfg = BenchConfig(parse_workload(workload), [concurrency], [policy], 40, seed, prompt_tokens=2048)
        rec = finishes_within(120, lambda engine=engine, cfg=cfg, policy=policy:  # type: ignore[misc]
                              run_one(engine, cfg, policy, concurrency))
        assert rec.figures.completed + rec.figures.failed == 40, (policy, kv, workload, concurrency)
        assert rec.figures.completed > 0
        assert all("KV" in e or "capacity" in e for e in rec.loop.failures.values()), rec.loop.failures
        assert_clean(rec)


def test_a_run_that_cannot_progress_ends_with_a_diagnosis(monkeypatch: pytest.MonkeyPatch) -> None:
    """The deadlock guard: no escrow ever succeeds, so nothing is admitted and nothing will free a
    block; the run ends with one line saying what waits, on which stage, for what."""
    async def never(self: StageHandle, items, remote: bool = True,  # type: ignore[no-untyped-def]
                    held_prefix: bool = False) -> Escrowed:
        return Escrowed(0, len(items))

    monkeypatch.setattr(StageHandle, "escrow", never)
    engine = SimEngine(SimConfig("llama-3-8b", "h200", 2, block_size=64, kv_blocks=[500]))
    cfg = BenchConfig(parse_workload("cold"), [4], ["wavepp"], 8, 0, prompt_tokens=2048)   # cold: no warm-up
    rec = finishes_within(60, lambda: run_one(engine, cfg, "wavepp", 4))   # reported, not raised
    msg = rec.figures.stalled or ""
    assert rec.figures.completed == 0 and rec.figures.requests == 0      # nothing finished before the stall
    assert "\n" not in msg
    assert "no progress for 60 s" in msg and "4 waiting for admission" in msg
    assert "stage 0:" in msg and "stage 1:" in msg and "0 leases" in msg


def test_a_stalled_bench_is_one_line_and_exit_1(monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    from wavepp.runtime.cli import main

    async def never(self: StageHandle, items, remote: bool = True,  # type: ignore[no-untyped-def]
                    held_prefix: bool = False) -> Escrowed:
        return Escrowed(0, len(items))

    monkeypatch.setattr(StageHandle, "escrow", never)
    code = finishes_within(60, lambda: main(["bench", "--model", "llama-3-8b", "--hardware", "h200", "--pp", "2",
                                             "--requests", "4", "--concurrency", "2", "--policy", "wavepp",
                                             "--stall-timeout", "5", "--quiet", "--prompt-tokens", "2048"]))
    assert code == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("wavepp: error: wavepp c=2: no progress for 5 s with work waiting"), err


def test_a_stalled_run_is_reported_with_its_figures_and_the_bench_goes_on(monkeypatch: pytest.MonkeyPatch,
                                                                          capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 26: one run's stall never ends the others. A stage that stops escrowing after the first
    requests stalls the first policy's run; the second policy's run still runs and is reported."""
    import json

    import wavepp.runtime.bench.runs as bench
    from wavepp.runtime.cli import main
    state = {"policy": "", "calls": 0}
    real_escrow, real_run_one = StageHandle.escrow, bench.run_one

    async def failing_after(self: StageHandle, items, remote: bool = True,  # type: ignore[no-untyped-def]
                            held_prefix: bool = False) -> Escrowed:
        state["calls"] += 1
        if state["policy"] == "wavepp" and state["calls"] > 4:    # the first run's middle: nothing fits any more
            return Escrowed(0, len(items))
        return await real_escrow(self, items, remote, held_prefix)

    def run_one(engine, cfg, policy, *args, **kwargs):  # type: ignore[no-untyped-def]
        state["policy"], state["calls"] = policy, 0
        return real_run_one(engine, cfg, policy, *args, **kwargs)

    monkeypatch.setattr(StageHandle, "escrow", failing_after)
    monkeypatch.setattr(bench, "run_one", run_one)
    out = Path(os.environ.get("TMPDIR", "/tmp")) / f"stall-{os.getpid()}.json"
    code = finishes_within(120, lambda: main(["bench", "--model", "llama-3-8b", "--hardware", "h200", "--pp", "2",
                                              "--requests", "24", "--concurrency", "4", "--workload", "cold",
                                              "--policy", "wavepp,trtllm-pp", "--stall-timeout", "5", "--quiet",
                                              "--prompt-tokens", "1024", "--json", str(out)]))
    assert code == 1                                              # a stall is a failure of that run ...
    runs = json.loads(out.read_text())["runs"]
    assert [r["policy"] for r in runs] == ["wavepp", "trtllm-pp"]  # ... and the next run went on
    assert "no progress for 5 s" in runs[0]["stalled"] and 0 < runs[0]["completed"] < 24
    assert runs[1]["stalled"] is None and runs[1]["completed"] == 24
    assert "stalled (its figures are to the stall)" in capsys.readouterr().out
    out.unlink()
