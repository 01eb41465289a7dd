"""The invariant checker (``runtime/guards/invariants.py``, ``--check-invariants``): every registered policy
runs clean under it on tight, uneven pools, and each check names what it finds broken."""

from __future__ import annotations

import asyncio
import random
from types import SimpleNamespace

import pytest

from wavepp.runtime.bench.runs import BenchConfig, run_one
from wavepp.runtime.engines.config import SimConfig
from wavepp.runtime.engines.sim.engine import SimEngine
from wavepp.runtime.guards import invariants
from wavepp.runtime.kvcache.handle import StageHandle
from wavepp.runtime.kvcache.hashing import block_hashes
from wavepp.runtime.kvcache.priming import prime
from wavepp.runtime.kvcache.stage_cache import StageCache
from wavepp.runtime.policies import POLICIES
from wavepp.runtime.sources.workloads import parse_workload


@pytest.mark.parametrize("policy", sorted(p.name for p in POLICIES))
def test_every_policy_runs_clean_under_the_checker_on_tight_uneven_pools(policy: str,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    checks = {"running": 0, "drained": 0}
    running, drained = invariants.check_running, invariants.check_drained

    async def count_running(loop):  # type: ignore[no-untyped-def]
        checks["running"] += 1
        await running(loop)

    async def count_drained(loop, tasks=()):  # type: ignore[no-untyped-def]
        checks["drained"] += 1
        await drained(loop, tasks)

    monkeypatch.setattr(invariants, "check_running", count_running)
    monkeypatch.setattr(invariants, "check_drained", count_drained)
    # 2K-token prompts: 33 blocks
    engine = SimEngine(SimConfig("llama-3-8b", "h200", 3, block_size=64, kv_blocks=[72, 96, 80]))
    cfg = BenchConfig(parse_workload("mixed"), [8], [policy], 40, 3, prompt_tokens=2048, check_invariants=True)
    rec = run_one(engine, cfg, policy, 8)
    assert rec.figures.completed == 40 and rec.figures.stalled is None
    assert sum(rec.figures.evictions) > 0                     # the pools were under pressure
    assert checks["running"] >= rec.figures.waves > 0 and checks["drained"] == 1   # warm-up waves too


def _cache_with_a_lease() -> tuple[StageCache, list[int]]:
    c = StageCache(0, 8, 4)
    rng = random.Random(1)
    tokens = [rng.randrange(100) for _ in range(16)]
    hashes = block_hashes(tokens, 4)
    prime(c, "warm", hashes, len(tokens))
    assert c.lease("r", hashes, 3, len(tokens)) == 3
    return c, hashes


def test_a_leased_prefix_that_was_evicted_is_named() -> None:
    c, hashes = _cache_with_a_lease()
    request = SimpleNamespace(id="r", request=SimpleNamespace(block_hashes=hashes))
    loop = SimpleNamespace(run_state=SimpleNamespace(admitted_now=lambda: [request]),
                           handles=[SimpleNamespace(stage=0, cache=c)])
    invariants.check_leases(loop)                              # intact
    boundary = c.leases["r"].boundary
    c.pool.unpin(boundary)                                     # a bug: the pin is lost ...
    c.pool.evict(c.pool.by_hash[hashes[3]])                    # ... the tail goes (legal) ...
    c.pool.evict(boundary)                                     # ... and then the leased block itself
    with pytest.raises(invariants.InvariantViolation, match="leased prefix of r is no longer cached"):
        invariants.check_leases(loop)


def test_a_stage_whose_accounting_broke_is_named() -> None:
    c, _ = _cache_with_a_lease()
    c.reserved = 99                                            # an escrow count no ticket backs
    with pytest.raises(invariants.InvariantViolation, match="stage 0"):
        asyncio.run(invariants.check_stages([StageHandle(c)]))


def test_a_drained_run_that_kept_anything_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    """A run that ends clean passes the drain checks; a lease left on a stage, an index entry the
    stage no longer holds, and a task still running are each named."""
    found: list[str] = []
    drained = invariants.check_drained

    async def corrupt_then_check(loop, tasks=()):  # type: ignore[no-untyped-def]
        await drained(loop, tasks)                             # the real end state is clean
        cache = loop.handles[1].cache
        for mutate in ("lease", "index", "task"):
            if mutate == "lease":
                cache.leases["ghost"] = next(iter(cache.leases.values()), None) or SimpleNamespace()
            elif mutate == "index":
                cache.leases.pop("ghost")
                await loop.store.hint_update(1, [], [next(iter(cache.pool.by_hash))])
            else:
                await loop.store.hint_update(1, [next(iter(cache.pool.by_hash))], [])
                tasks = [asyncio.create_task(asyncio.sleep(5), name="forgotten")]
            try:
                await drained(loop, tasks)
            except invariants.InvariantViolation as exc:
                found.append(str(exc))
        for t in tasks:
            t.cancel()

    monkeypatch.setattr(invariants, "check_drained", corrupt_then_check)
    engine = SimEngine(SimConfig("llama-3-8b", "h200", 2, block_size=64, kv_blocks=[200]))
    cfg = BenchConfig(parse_workload("reuse90"), [4], ["wavepp"], 12, 0, prompt_tokens=1024, check_invariants=True)
    run_one(engine, cfg, "wavepp", 4)
    assert len(found) == 3, found
    assert "stage 1: 1 leases" in found[0]
    assert "hint index: stage 1 caches" in found[1] and "the index says" in found[1]
    assert "tasks left running: forgotten" in found[2]
