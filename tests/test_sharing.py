"""Sharing in flight (runtime/mechanisms/sharing.py): a request whose next uncached block another admitted
request is computing waits for it under wavepp, and computes it again under the baselines' ``share=off``."""

from __future__ import annotations

from array import array

from wavepp.runtime.bench.runs import BenchConfig, run_one
from wavepp.runtime.engines.config import SimConfig
from wavepp.runtime.engines.sim.engine import SimEngine
from wavepp.runtime.kvcache.hashing import block_hashes
from wavepp.runtime.mechanisms.sharing import (
    GO,
    WAIT,
    ComputeAgain,
    Follow,
    FollowPlanned,
    FollowProducer,
    Sharing,
    WaitForProducer,
)
from wavepp.runtime.request import AdmittedRequest, Request
from wavepp.runtime.run_state import RunState
from wavepp.runtime.sources.workloads import parse_workload
from wavepp.telemetry import names as N

BLOCK = 64


def request(i: int, doc: int, doc_blocks: int = 8, suffix: int = 100) -> Request:
    tokens = array("I", [doc * 1000 + t % 997 for t in range(doc_blocks * BLOCK)] + [i * 7 + t for t in range(suffix)])
    return Request(f"r{i}", tokens, 0.0, block_hashes(tokens, BLOCK), "test")


def test_a_request_waits_for_a_producer_admitted_earlier_or_ahead_of_it_in_the_round() -> None:
    a, b, c, other = request(0, doc=1), request(1, doc=1), request(2, doc=1), request(3, doc=2)
    limits = [(r.num_tokens - 1) // BLOCK for r in (a, b, c, other)]
    def waiting(share: Sharing, requests: list[Request], ks: list[int], limits: list[int],
                computing: set[int]) -> list[bool]:
        return [d is WAIT for d in share.decide(requests, ks, limits, computing, {}, True)]

    wait = WaitForProducer()
    # nothing in flight: the first request of doc 1 goes, the two behind it wait for it, doc 2 goes
    assert waiting(wait, [a, b, c, other], [0, 0, 0, 0], limits, set()) == [False, True, True, False]
    # doc 1 being computed by an admitted request: all three wait; a boundary past the document does not
    assert waiting(wait, [a, b, other], [0, 0, 0], limits[:3], set(a.block_hashes)) == [True, True, False]
    assert waiting(wait, [b], [8], [limits[1]], set(a.block_hashes[:8])) == [False]
    assert waiting(wait, [b], [limits[1]], [limits[1]], set(b.block_hashes)) == [False]     # nothing left to reuse
    assert waiting(ComputeAgain(), [a, b], [0, 0], limits[:2], set(a.block_hashes)) == [False, False]


def test_a_request_follows_the_producer_of_its_next_block_through_the_blocks_they_share() -> None:
    a, b, other = request(0, doc=1), request(1, doc=1), request(3, doc=2)
    producer = AdmittedRequest(a, 0, 0.0, BLOCK)
    producers = dict.fromkeys(a.block_hashes, producer)
    limits = [(r.num_tokens - 1) // BLOCK for r in (b, other)]
    follow, planned = FollowProducer(), FollowPlanned()
    assert follow.decide([b, other], [0, 0], limits, set(a.block_hashes), producers, True) == [
        Follow(producer, 8), GO]                                     # the 8 document blocks, not a's question
    assert follow.decide([b], [0], limits[:1], set(a.block_hashes), producers, False) == [WAIT]   # hybrid
    producer.scheduled = 3 * BLOCK + 10                              # a was scheduled for 3 full blocks so far
    assert planned.decide([b], [0], limits[:1], set(a.block_hashes), producers, True) == [Follow(producer, 3)]
    producer.scheduled = 0
    assert planned.decide([b], [0], limits[:1], set(a.block_hashes), producers, True) == [GO]


def test_the_run_state_keeps_a_producers_blocks_until_the_index_has_them() -> None:
    run = RunState(2)
    a = AdmittedRequest(request(0, doc=1), 2, 0.0, BLOCK)
    run.admitted([a], [])
    assert set(run.computing) == set(a.request.block_hashes[2:])
    mark_before = run.settle_mark()
    run.drop(a)
    assert set(run.computing) == set(a.request.block_hashes[2:])     # ended, not yet in the hint index
    run.settled(mark_before)                                         # a flush begun before it ended
    assert run.computing
    run.settled(run.settle_mark())
    assert not run.computing


def computed_tokens(policy: str) -> tuple[int, int, int]:
    """(computed tokens, the minimum - each document once plus every question -, rounds with waiters)."""
    engine = SimEngine(SimConfig("llama-3-8b", "h200", 2))
    cfg = BenchConfig(parse_workload("docs:2:suffix=256"), [8], [policy], 24, prompt_tokens=4096)
    rec = run_one(engine, cfg, policy, 8)
    computed = sum(int(s["a"][N.TOKENS]) for s in rec.encoded
                   if s["n"] == N.EXECUTE and s["a"].get(N.STAGE) == 0)
    docs = {int(s["a"][N.GEN_AI_INPUT_TOKENS]) - 256 for s in rec.encoded if s["n"] == N.REQUEST}
    waited = sum(1 for s in rec.encoded if s["n"] == N.ADMISSION_ROUND and s["a"].get(N.WAITING_FOR_PRODUCER))
    return computed, sum(docs) + 24 * 256, waited


def test_wavepp_computes_each_document_once_where_the_baseline_rule_computes_it_again() -> None:
    """Eight clients on two ~4K-token documents no stage holds: with share=wait the requests behind a
    document's first wait for it (visible as round spans with waiters) and compute only their
    questions, as they do following it (wavepp); with share=off every request admitted while its
    document is computed computes it too."""
    waiting, minimum, waited = computed_tokens("wavepp+share=wait")
    again, minimum_off, waited_off = computed_tokens("wavepp+share=off")
    following, _, waited_following = computed_tokens("wavepp")
    # Following, a request waits in line only behind a producer of the same round (not yet admitted).
    assert following <= waiting and waited_following < waited
    assert minimum == minimum_off
    assert waiting <= minimum + 24 * BLOCK and waited > 0            # a question's partial block aside
    assert again > minimum + 2048 and waited_off == 0


def test_a_follower_computes_none_of_its_producers_tokens_and_starts_before_it_completes() -> None:
    """Three clients on one ~4K-token document no stage holds: the two behind the first follow it -
    admitted at once, their questions planned before it completes - and the pipeline computes the
    document once."""
    engine = SimEngine(SimConfig("llama-3-8b", "h200", 2))
    cfg = BenchConfig(parse_workload("docs:1:suffix=256"), [3], ["wavepp"], 3, prompt_tokens=4096)
    rec = run_one(engine, cfg, "wavepp", 3)
    requests = {s["a"][N.REQUEST_ID]: s for s in rec.encoded if s["n"] == N.REQUEST}
    followers = [r for r in requests.values() if N.FOLLOWS in r["a"]]
    assert len(followers) == 2
    producer = requests[followers[0]["a"][N.FOLLOWS]]
    plans = [s for s in rec.encoded if s["n"] == N.WAVE_PLAN and s["a"].get(N.TOKENS)]
    for f in followers:
        rid = f["a"][N.REQUEST_ID]
        first = min(p["t0"] for p in plans if rid in p["a"][N.REQUEST_IDS])
        assert first < producer["t1"]                                  # never waits for its completion
        assert f["a"][N.FOLLOWED_TOKENS] > 0
        assert f["a"][N.REUSED_TOKENS] == f["a"][N.FOLLOWED_TOKENS]    # nothing was cached: all followed
    computed = sum(int(s["a"][N.TOKENS]) for s in rec.encoded if s["n"] == N.EXECUTE and s["a"].get(N.STAGE) == 0)
    questions = sum(int(r["a"][N.GEN_AI_INPUT_TOKENS]) - int(r["a"][N.REUSED_TOKENS]) for r in followers)
    assert computed == int(producer["a"][N.GEN_AI_INPUT_TOKENS]) + questions   # the document once
