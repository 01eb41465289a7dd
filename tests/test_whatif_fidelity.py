"""The what-if's replay of the unchanged knobs reproduces a virtual-time sim run: the run's prefix
structure (which request shared which prefix with which, in flight or finished) is rebuilt, so the
replay computes the tokens the run computed."""

from __future__ import annotations

import pytest

from wavepp.runtime.bench.runs import BenchConfig, RunRecord, run_one
from wavepp.runtime.control.knobs import Knobs
from wavepp.runtime.engines.config import SimConfig
from wavepp.runtime.engines.sim.engine import SimEngine
from wavepp.runtime.sources.workloads import parse_workload
from wavepp.runtime.whatif import preview as W
from wavepp.telemetry import names as N


def docs_run(workload: str, concurrency: int = 16, requests: int = 96) -> RunRecord:
    """Long documents asked about by many clients at once: most of their sharing happens in flight."""
    knobs = Knobs()
    engine = SimEngine(SimConfig("glm-5.2", "b300", 4))
    cfg = BenchConfig(parse_workload(workload), [concurrency], [knobs.policy], requests, prompt_tokens=16384,
                      knobs=knobs)
    return run_one(engine, cfg, knobs.policy, concurrency)


def computed(spans: list[dict[str, object]]) -> int:
    return sum(int(s["a"].get(N.COMPUTED_TOKENS, 0)) for s in spans if s["n"] == N.REQUEST)  # type: ignore[index, union-attr, call-overload]


@pytest.mark.parametrize("workload", ["docs:8", "reuse90"])
def test_the_unchanged_knobs_reproduce_a_sim_run_within_2_percent(workload: str) -> None:
    run = docs_run(workload)
    replay = W.replay_of(run.encoded, run.meta, None)
    spec = W.sim_spec(run.meta)
    current = W.knobs_at_end(run.meta, [])
    observed = W.observed_over(run.encoded, replay, spec.pp)
    result = W.preview(replay, spec, current, current)
    replayed = result.current.replayed
    assert result.current.raw is None                      # the same model: never scaled onto the run
    assert result.error.baseline is not None and abs(result.error.baseline) <= 0.02
    assert replayed.input_tokens_per_s == pytest.approx(observed.input_tokens_per_s, rel=0.02)
    assert replayed.prefill_latency_p50_s == pytest.approx(observed.prefill_latency_p50_s, rel=0.02)
    once = W.replay_once(replay, spec, current, W.Deadline(60, 1, None), "check")
    assert computed(once.encoded) == pytest.approx(computed(run.encoded), rel=0.02)


def test_the_replay_prices_steps_as_the_run_did() -> None:
    """``auto`` is saved as what it chose on the run's machine (a replay where other kernel tables lie
    beside the repo must not choose again: it priced a docs:24 run's replay 83 % slower), and the KV
    type and all-reduce travel with it."""
    run = docs_run("reuse90", requests=16)
    chosen = run.meta["sim"]["cost_model"]
    assert chosen in ("table", "analytic")
    spec = W.sim_spec({**run.meta, "sim": {**run.meta["sim"], "kv_dtype": "fp8", "comm": "nccl"}})
    assert (spec.cost_model, spec.kv_dtype, spec.comm) == (chosen, "fp8", "nccl")
    engine = spec.build()
    try:
        assert engine.kv_dtype == "fp8" and engine.cost_model_name.split(" ")[0] == chosen
    finally:
        engine.close()
