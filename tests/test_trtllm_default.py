"""TensorRT-LLM with its LLM API defaults (``trtllm-pp-default``, docs/trtllm-defaults.md): chunked prefill off,
so each request's uncached suffix runs whole in one micro-batch of at most ``max_num_tokens``, FCFS up to the
first request that does not fit; a longer prompt is refused on arrival, cached prefix or not."""

from __future__ import annotations

from array import array
from collections import Counter

import pytest

from wavepp.runtime.bench.runs import BenchConfig, run_one
from wavepp.runtime.control.knobs import Knobs
from wavepp.runtime.engines.config import SimConfig
from wavepp.runtime.engines.sim.engine import SimEngine
from wavepp.runtime.planning.planner import Room, WholePlanner
from wavepp.runtime.policies import get_policy
from wavepp.runtime.request import AdmittedRequest, Request
from wavepp.runtime.sources.workloads import parse_workload
from wavepp.telemetry import names as N

B = 64


def admitted(rid: str, tokens: int, reused: int = 0) -> AdmittedRequest:
    req = Request(rid, array("I", range(tokens)), 0.0, [], "t")
    return AdmittedRequest(req, reused // B, 0.0, B)


def test_a_batch_takes_whole_suffixes_and_closes_at_the_first_that_does_not_fit() -> None:
    planner = WholePlanner(8192, B)
    head, big, small = admitted("head", 5000), admitted("big", 6000), admitted("small", 1000)
    plan = planner.plan([head, big, small])
    assert plan is not None
    assert [(c.request_id, c.start, c.length) for c in plan.chunks] == [("head", 0, 5000)]   # small waits behind big
    assert planner.room([head, big, small]) == Room(8192 - 5000, whole=True)


def test_the_budget_charges_the_uncached_suffix_only() -> None:
    planner = WholePlanner(8192, B)
    docs = [admitted(f"r{i}", 8000, reused=7040) for i in range(9)]        # 960 uncached tokens each
    plan = planner.plan(docs)
    assert plan is not None
    assert [(c.start, c.length) for c in plan.chunks] == [(7040, 960)] * 8            # 8 x 960 <= 8192 < 9 x 960


def test_a_prompt_longer_than_the_batch_is_refused_whatever_it_has_cached() -> None:
    planner = WholePlanner(8192, B)
    assert planner.refusal(8192) is None
    assert planner.refusal(8193) == ("prompt of 8193 tokens is longer than the batch's 8192 tokens "
                                     "(max_num_tokens without chunked prefill)")
    assert get_policy("trtllm-pp").make_planner(Knobs(), 4, B, None).refusal(10**6) is None   # type: ignore[arg-type]


def run(policy: str, prompt_tokens: int, budget: int) -> tuple[int, int, Counter[str], list[int]]:
    """Eight clients on two documents (llama-3-8b on the sim, PP2): (completed, failed, stage-0 chunks per
    request, stage-0 tokens per wave)."""
    cfg = BenchConfig(parse_workload("docs:2:suffix=256"), [8], [policy], 24, prompt_tokens=prompt_tokens,
                      knobs=Knobs(static_chunk_tokens=budget), keep_spans=True)
    rec = run_one(SimEngine(SimConfig("llama-3-8b", "h200", 2)), cfg, policy, 8)
    steps = [s for s in rec.encoded if s["n"] == N.EXECUTE and s["a"].get(N.STAGE) == 0]
    chunks = Counter(r for s in steps for r in s["a"][N.REQUEST_IDS])
    return rec.figures.completed, rec.loop.num_failed, chunks, [int(s["a"][N.TOKENS]) for s in steps]


@pytest.mark.parametrize("policy", ["trtllm-pp-default"])
def test_each_request_runs_whole_in_one_wave(policy: str) -> None:
    done, failed, chunks, waves = run(policy, 4096, 6144)
    assert done == 24 and failed == 0
    assert set(chunks.values()) == {1} and max(waves) <= 6144
    _, _, chunked, _ = run("trtllm-pp", 4096, 6144)                      # the same loop with chunked prefill
    assert max(chunked.values()) > 1


def test_with_every_default_a_long_document_is_refused_and_the_run_goes_on() -> None:
    done, failed, chunks, _ = run("trtllm-pp-default", 12288, 8192)
    assert done == 0 and failed == 24 and not chunks
