"""When a running request's blocks become reusable (runtime/mechanisms/block_publication.py) and when a waiting
request is looked up (runtime/mechanisms/lookup_moment.py): the baselines reuse a document another request is
still computing once its chunks have retired, where publication at completion computes it again."""

from __future__ import annotations

from array import array

from wavepp.runtime.bench.runs import BenchConfig, run_one
from wavepp.runtime.control.knobs import Knobs
from wavepp.runtime.engines.config import SimConfig
from wavepp.runtime.engines.sim.engine import SimEngine
from wavepp.runtime.kvcache.hashing import block_hashes
from wavepp.runtime.kvcache.stage_cache import StageCache
from wavepp.runtime.mechanisms.lookup_moment import OnAdmission, OnFirstScheduling
from wavepp.runtime.planning.planner import Room, StaticPlanner
from wavepp.runtime.request import AdmittedRequest, Request
from wavepp.runtime.sources.workloads import parse_workload
from wavepp.telemetry import names as N

B = 64


def prompt(doc_blocks: int, tail: int, seed: int) -> tuple[list[int], array[int]]:
    tokens = array("I", [t % 991 for t in range(doc_blocks * B)] + [seed * 13 + t for t in range(tail)])
    return block_hashes(tokens, B), tokens


def test_stored_blocks_are_leased_before_the_producer_completes_and_stay_after_a_failure() -> None:
    cache = StageCache(0, 64, B)
    a_hashes, a = prompt(8, 10, 1)
    cache.lease("a", a_hashes, 0, len(a))
    cache.escrow("a", 9)
    cache.materialize("a", 0, 4 * B, 0)              # a chunk of 4 blocks ran on every stage
    assert cache.store("a", a_hashes, 4) == 4
    assert cache.prefix_length(a_hashes) == 4        # reusable now, a still running
    assert cache.store("a", a_hashes, 4) == 0        # stored once
    b_hashes, b = prompt(8, 20, 2)                   # the same document, another question
    assert cache.lease("b", b_hashes, 4, len(b)) == 4
    cache.release("a")                               # a fails: its computed blocks stay cached, b keeps them
    cache.check()
    assert cache.prefix_length(b_hashes) == 4
    cache.escrow("b", 5)
    cache.materialize("b", 4 * B, len(b) - 4 * B, 4)
    cache.complete("b", b_hashes)
    cache.check()
    assert cache.prefix_length(b_hashes) == 8 and not cache.leases


def test_completion_after_store_attaches_the_rest_once() -> None:
    cache = StageCache(0, 64, B)
    hashes, tokens = prompt(8, 10, 1)
    cache.lease("a", hashes, 0, len(tokens))
    cache.escrow("a", 9)
    cache.materialize("a", 0, len(tokens), 0)
    cache.store("a", hashes, 3)
    cache.complete("a", hashes)
    cache.check()
    assert cache.prefix_length(hashes) == 8 and cache.pool.num_cached == 8


def test_first_scheduling_admits_only_into_the_next_waves_room() -> None:
    planner = StaticPlanner(8192, B)
    doc = Request("a", array("I", range(32768)), 0.0, [], "t")
    running = AdmittedRequest(doc, 0, 0.0, B)
    assert OnAdmission().room(planner, [running]) is None
    assert OnFirstScheduling().room(planner, [running]) == Room(0)         # the document fills the wave
    running.scheduled = 32768 - 1000
    assert OnFirstScheduling().room(planner, [running]) == Room(8192 - 1000)


def computed(policy: str) -> int:
    """Tokens stage 0 computed for eight clients on two ~4K-token documents no stage holds (llama-3-8b on
    the sim, PP2; static 1024-token waves, so a document takes several waves)."""
    engine = SimEngine(SimConfig("llama-3-8b", "h200", 2))
    cfg = BenchConfig(parse_workload("docs:2:suffix=256"), [8], [policy], 24, prompt_tokens=4096,
                      knobs=Knobs(static_chunk_tokens=1024))
    rec = run_one(engine, cfg, policy, 8)
    return sum(int(s["a"][N.TOKENS]) for s in rec.encoded if s["n"] == N.EXECUTE and s["a"].get(N.STAGE) == 0)


def test_a_baseline_reuses_the_retired_chunks_of_a_document_still_computed() -> None:
    faithful = computed("trtllm-pp")
    before = computed("trtllm-pp+publish=completion+lookup-at=admission")
    assert faithful < before
    assert computed("trtllm-pp+publish=completion") <= before      # looked up later, at worst the same


def producer_and_follower() -> tuple[StageCache, list[int], list[int], array[int]]:
    """Producer a computing an 8-block document no stage holds (its first 8 blocks prepared here), follower b
    leased through them; answers the cache, a's and b's hashes and b's tokens."""
    cache = StageCache(0, 64, B)
    a_hashes, a = prompt(8, 10, 1)
    b_hashes, b = prompt(8, 20, 2)
    cache.lease("a", a_hashes, 0, len(a))
    cache.escrow("a", 9)
    assert cache.lease("b", b_hashes, 0, len(b), follow=("a", 8)) == 8      # nothing cached: all followed
    cache.escrow("b", 1)
    cache.materialize("a", 0, 8 * B, 0)
    return cache, a_hashes, b_hashes, b


def test_a_follower_reads_the_producers_blocks_and_caches_them_if_it_completes_first() -> None:
    cache, a_hashes, b_hashes, b = producer_and_follower()
    table = cache.materialize("b", 8 * B, len(b) - 8 * B, 8)
    assert table[:8] == cache.tables["a"][:8]                                # the producer's own blocks
    cache.complete("b", b_hashes)                                            # b first: a's blocks cached by b
    assert cache.prefix_length(b_hashes) == 8
    cache.materialize("a", 8 * B, 10, 0)
    cache.complete("a", a_hashes)
    cache.check()
    assert cache.pool.num_cached == 8 and not cache.leases


def test_a_producer_that_fails_leaves_its_followers_blocks_until_they_let_go() -> None:
    cache, _, _, _ = producer_and_follower()
    cache.materialize("b", 8 * B, 20, 8)
    cache.release("a")
    assert cache.pool.num_free < 64 - 1                                      # b still holds a's eight blocks
    cache.release("b")
    cache.check()
    assert cache.pool.num_free + cache.pool.num_cached == 64 and cache.pool.num_cached == 0


def test_a_lease_lowered_below_its_followed_blocks_follows_nothing() -> None:
    cache = StageCache(0, 64, B)
    a_hashes, a = prompt(8, 10, 1)
    b_hashes, b = prompt(8, 20, 2)
    cache.lease("a", a_hashes, 0, len(a))
    assert cache.lease("b", b_hashes, 0, len(b), follow=("a", 8)) == 8
    assert cache.shrink_lease("b", 0) == 0                                   # another stage could not follow
    cache.escrow("b", 9)
    assert len(cache.materialize("b", 0, len(b), 0)) == 9                    # computes it all itself
