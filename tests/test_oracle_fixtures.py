"""Our presets against the decisions a peer's own scheduler took on the same scenario (tests/data/oracle/, written
by ``make oracle``; no vLLM import here): the tokens scheduled per step and each request's hit at its first
scheduling must be equal, or differ by exactly the difference named below with its reason.

A known difference is asserted to be exactly itself (the first step whose tokens differ, and every request's
first scheduling that differs, or their count and hit totals on the larger scenario), so a change that moves a
preset toward or away from its source fails here: delete or update the entry as the mechanism lands.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from tests.oracle_harness import FIXTURES, Decisions, first_difference, load_fixture, oracle_decisions, run_sim
from wavepp.runtime.control.knobs import Knobs

# What vllm-pp does that vLLM 0.34.0 does not, as read from both (vllm/v1/core/kv_cache_manager.py,
# vllm/v1/core/sched/scheduler.py; runtime/policies/vllm_pp.py).
SAME_STEP = (
    "a request looked up in a step hits what the running requests were scheduled for before it (share=planned), "
    "not the chunk a running request is scheduled for in that same step: vLLM schedules the running requests first "
    "and caches their blocks in allocate_slots before the waiting queue is looked up (Scheduler.schedule), so a "
    "request joining the producer's step hits that chunk too; ours hits it one wave later, or computes it")
NO_LONG_PREFILL_CAP = (
    "our chunking has no per-request chunk cap: vLLM's long_prefill_token_threshold limits each request's chunk in "
    "a step (when more than one request is running or waiting), so several requests share a step's budget")


@dataclass(frozen=True, slots=True)
class Known:
    """A named difference: the first step whose scheduled tokens differ; the requests whose first scheduling
    differs, each (oracle (step, hit), ours (step, hit)) - or, on a scenario of many requests, their count
    and hit totals (oracle, ours)."""

    reasons: tuple[str, ...]
    first_step: int | None
    hits: dict[str, tuple[tuple[int, int], tuple[int, int]]] = field(default_factory=dict)
    summary: tuple[int, int, int] | None = None


KNOWN: dict[str, Known] = {
    "vllm-one-document-8192-lpt4096": Known((NO_LONG_PREFILL_CAP,), 2, {"r1": ((2, 20480), (4, 32768))}),
    "vllm-zipf-docs-16384": Known((SAME_STEP,), 1, summary=(29, 360448, 345344)),
    "vllm-zipf-docs-8192": Known((SAME_STEP,), 2, summary=(24, 360448, 352512)),
    "vllm-zipf-docs-8192-lpt4096": Known((NO_LONG_PREFILL_CAP, SAME_STEP), 0, summary=(24, 360448, 352512)),
}


def preset(fixture: dict[str, Any]) -> tuple[str, Knobs, int]:
    """The preset of the fixture's engine with the fixture's budget, its batches in flight as the ring, and its
    pipeline stages. vllm-pp: its own static 16384, else the static budget at the fixture's
    ``max_num_batched_tokens``. sglang-pp: the fixture's ``chunked_prefill_size`` as a static budget (the
    oracle runs SGLang without ``--enable-dynamic-chunking``, the preset's chunking)."""
    s = fixture["settings"]
    if fixture["oracle"] == "sglang":
        return ("sglang-pp+chunking=static", Knobs(static_chunk_tokens=int(s["chunked_prefill_size"]),
                                                   ring=int(s["batches_in_flight"])), int(s["pp_size"]))
    budget = int(s["max_num_batched_tokens"])
    policy = "vllm-pp" if budget == 16384 else "vllm-pp+chunking=static"
    return (policy, Knobs(static_chunk_tokens=budget, ring=int(s["batches_in_flight"])),
            int(s["pipeline_parallel_size"]))


def observed(oracle: Decisions, ours: Decisions, per_request: bool) -> Known:
    hits = {rid: (oracle.first[rid], ours.first[rid]) for rid in oracle.first if oracle.first[rid] != ours.first[rid]}
    first = first_difference(oracle.steps, ours.steps)
    if per_request:
        return Known((), first, hits)
    summary = (len(hits), sum(h for _, h in oracle.first.values()), sum(h for _, h in ours.first.values()))
    return Known((), first, summary=summary)


ORACLE_FIXTURES = sorted(p.stem for p in FIXTURES.glob("*.json") if p.stem != "scenarios")
VERSIONS = {"vllm": "0.34.0", "sglang": "0.5.23"}


def test_every_known_difference_names_a_recorded_fixture() -> None:
    assert ORACLE_FIXTURES and set(KNOWN) <= set(ORACLE_FIXTURES)


@pytest.mark.parametrize("name", ORACLE_FIXTURES)
def test_our_preset_schedules_as_its_source_does_or_differs_as_named(name: str) -> None:
    fixture = load_fixture(name)
    assert fixture["version"] == VERSIONS[fixture["oracle"]]
    policy, knobs, pp = preset(fixture)
    oracle = oracle_decisions(fixture)
    ours = run_sim(fixture, policy, knobs, pp)
    assert set(ours.first) == set(oracle.first)            # every request ran, once
    known = KNOWN.get(name)
    if known is None:
        assert ours.steps == oracle.steps
        assert ours.first == oracle.first
        return
    got = observed(oracle, ours, per_request=known.summary is None)
    assert (got.first_step, got.hits, got.summary) == (known.first_step, known.hits, known.summary), known.reasons


def test_the_fixtures_record_what_the_issue_expects_of_vllm() -> None:
    """The oracle's own answers on one document (DESIGN §3.2): under FCFS with the budget filled by the producer,
    a request arriving mid-document is first scheduled in the producer's last step and hits the whole document;
    with long_prefill_token_threshold it is scheduled at once and hits what the producer has been scheduled for,
    the same step's chunk included."""
    fcfs = oracle_decisions(load_fixture("vllm-one-document-8192"))
    assert fcfs.first == {"r0": (0, 0), "r1": (4, 32768), "r2": (5, 32768)}
    assert fcfs.steps[4] == {"r0": 128, "r1": 128}                 # r0's last chunk, r1's suffix
    capped = oracle_decisions(load_fixture("vllm-one-document-8192-lpt4096"))
    assert capped.first["r1"] == (2, 20480) and capped.steps[:2] == [{"r0": 8192}] * 2
    assert capped.steps[2] == {"r0": 4096, "r1": 4096}             # r0's 16,384-20,480 is in r1's hit


def test_requests_arrive_in_our_run_before_the_wave_their_fixture_names() -> None:
    """The harness's arrivals: no request is scheduled before the wave it arrives before."""
    fixture = load_fixture("vllm-one-document-8192")
    ours = run_sim(fixture, *preset(fixture))
    assert ours.first["r0"] == (0, 0)
    assert ours.first["r1"][0] >= 2 and ours.first["r2"][0] >= 5
    assert ours.steps[:4] == [{"r0": 8192}] * 4


def test_the_sglang_fixture_matches_a_producer_up_to_its_previous_chunk() -> None:
    """SGLang 0.5.23's answer (DESIGN §3.2): a request joining a batch matches what the tree holds at the start of
    the round, the producer's chunks up to its previous one; it computes the rest of the document again beside
    the producer's own chunk."""
    zipf = load_fixture("sglang-zipf-docs-8192")
    steps = oracle_decisions(zipf).steps
    assert steps[1]["z03"] == 3328                                     # z03 (document 0) computes 0-3,328
    assert zipf["first_scheduling"]["z05"] == {"step": 2, "hit": 3328}  # z05 (document 0) joins at step 2
    # both compute 3,328-4,096 of the document in step 2, each with its own 256-token suffix
    assert steps[2]["z03"] == 4352 - 3328 and steps[2]["z05"] == 4352 - 3328


# The three-arrival scenario (one 32K-token document, requests arriving before waves 0, 2 and 5; PP 4, 8192-token
# waves, four in flight): each preset's (first wave, hit at its first scheduling) for r1 and r2, as its source
# publishes and looks up (DESIGN §3.2, docs/structure.md's publication and lookup-moment mechanisms).
THREE_ARRIVALS = {
    # vLLM: blocks cached when scheduled, looked up at first scheduling, which waits for the budget r0 fills
    # (allocate_slots, Scheduler.schedule): the whole document, as the oracle fixture records.
    "vllm-pp+chunking=static": {"r1": (4, 32768), "r2": (5, 32768)},
    # SGLang: the chunk scheduled last is in the tree when the next batch forms (stash_chunked_request): r1, first
    # scheduled with r0's last 128 tokens, matches the whole document.
    "sglang-pp+chunking=static": {"r1": (4, 32768), "r2": (5, 32768)},
    # TensorRT-LLM: blocks stored when a micro-batch is handled after it ran (update_resources ->
    # store_context_blocks), which rank 0 does P waves later (_executor_loop_pp): at wave 4 only wave 0's chunk
    # is stored; r1 computes the rest of the document itself. r2 comes when r0's blocks are all stored.
    "trtllm-pp+chunking=static": {"r1": (4, 8192), "r2": (7, 32768)},
    # Before PR #6683 blocks were stored at completion only: r1 computes the whole document again.
    "trtllm-pp-legacy+chunking=static": {"r1": (4, 0), "r2": (8, 32768)},
    # The old rule of every baseline (published at completion, the reuse boundary fixed at admission), kept as a
    # variant: r1 and r2 were both admitted before r0 completed, and both compute the document again.
    "wavepp+share=off+chunking=static": {"r1": (4, 0), "r2": (8, 0)},
}


@pytest.mark.parametrize("policy", sorted(THREE_ARRIVALS))
def test_each_preset_hits_on_the_three_arrival_scenario_what_its_source_gives(policy: str) -> None:
    fixture = load_fixture("vllm-one-document-8192")
    ours = run_sim(fixture, policy, Knobs(static_chunk_tokens=8192, ring=4), 4)
    assert ours.first["r0"] == (0, 0)
    assert {r: ours.first[r] for r in ("r1", "r2")} == THREE_ARRIVALS[policy]


def test_wavepp_follows_the_document_on_the_three_arrival_scenario() -> None:
    """WavePP's followers compute none of the document, wherever its cost budget cuts it, and never recompute it."""
    fixture = load_fixture("vllm-one-document-8192")
    ours = run_sim(fixture, "wavepp", Knobs(ring=4), 4)
    assert ours.first["r1"][1] == ours.first["r2"][1] == 32768
    computed = {r: sum(step.get(r, 0) for step in ours.steps) for r in ("r0", "r1", "r2")}
    assert computed == {"r0": 32768 + 128, "r1": 128, "r2": 128}
