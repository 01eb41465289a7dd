"""Idle time split by cause: every idle instant gets exactly one cause, and the causes are the
ones the spans show."""

from __future__ import annotations

from typing import Any

import pytest

from wavepp.runtime.bench.runs import BenchConfig, run_one
from wavepp.runtime.engines.config import SimConfig
from wavepp.runtime.engines.sim.engine import SimEngine
from wavepp.runtime.figures.idle_causes import CAUSES, idle_causes, idle_intervals, sums, top_causes
from wavepp.runtime.sources.workloads import parse_workload
from wavepp.telemetry import names as N

MS = 1_000_000


def span(name: str, t0: float, t1: float, **attrs: Any) -> dict[str, Any]:
    return {"n": name, "t0": int(t0 * MS), "t1": int(t1 * MS), "a": attrs}


def ms(causes: dict[str, float]) -> dict[str, float]:
    return {c: round(v * 1e3, 6) for c, v in causes.items() if v}


def test_a_two_stage_timeline_is_split_into_the_causes_its_spans_show() -> None:
    """Ring of 1. Stage 0 runs wave 0, waits for its retirement (ring full), then prepares wave 1.
    Stage 1 waits for wave 0 to leave stage 0 and cross the link, then for wave 1."""
    E, W, M, S = N.EXECUTE, N.WAVE_ID, N.MATERIALIZE, N.SEND
    spans = [
        span(N.WAVE_PLAN, 0, 1, **{W: 0, N.RING: 1}),
        span(E, 1, 5, **{N.STAGE: 0, W: 0}),
        span(S, 5, 6, **{N.STAGE: 0, W: 0}),
        span(E, 6, 10, **{N.STAGE: 1, W: 0}),
        span(N.WAVE_PLAN, 10, 10.5, **{W: 1, N.RING: 1}),      # planned once wave 0 retired at 10
        span(M, 10.5, 11, **{N.STAGE: 0, W: 1}),
        span(E, 11, 15, **{N.STAGE: 0, W: 1}),
        span(S, 15, 16, **{N.STAGE: 0, W: 1}),
        span(N.STAGE_WAIT, 16, 17, **{N.STAGE: 1}),
        span(M, 16, 17.5, **{N.STAGE: 1, W: 1}),
        span(E, 17.5, 20, **{N.STAGE: 1, W: 1}),
    ]
    s0, s1 = idle_causes(spans, 2, 0, 20 * MS)
    assert ms(s0) == {"fill": 1.0, "ring_full": 5.0, "no_work": 0.5, "preparation": 0.5, "drain": 5.0}
    assert ms(s1) == {"fill": 6.0, "previous_stage": 5.0, "transfer": 1.0, "kv_capacity": 1.0, "preparation": 0.5}
    assert top_causes(s1, 0.020) == "fill 30.0%, previous_stage 25.0%"


def test_admission_is_charged_only_for_rounds_the_loop_ran_itself() -> None:
    """A round's span says whether the loop waited for it (``wavepp.admission.critical_path``)."""
    def run(critical: bool) -> list[dict[str, float]]:
        return idle_causes([span(N.EXECUTE, 0, 1, **{N.STAGE: 0, N.WAVE_ID: 0}),
                            span(N.ADMISSION_ROUND, 1, 3, **{N.ADMISSION_CRITICAL: critical}),
                            span(N.WAVE_PLAN, 3, 4, **{N.WAVE_ID: 1, N.RING: 4}),
                            span(N.EXECUTE, 4, 5, **{N.STAGE: 0, N.WAVE_ID: 1})], 1, 0, 5 * MS)
    [inline], [beside] = run(True), run(False)
    assert ms(inline) == {"admission": 2.0, "no_work": 1.0}
    assert ms(beside) == {"no_work": 3.0}


@pytest.mark.parametrize("policy", ["wavepp", "trtllm-pp", "trtllm-pp-legacy"])
def test_causes_sum_to_each_stages_idle_time(policy: str) -> None:
    engine = SimEngine(SimConfig("llama-3-8b", "h200", 4, block_size=64, kv_blocks=[1000, 200, 1000, 1000]))
    cfg = BenchConfig(parse_workload("reuse90"), [8], [policy], 48, 0, prompt_tokens=2048)
    rec = run_one(engine, cfg, policy, 8)
    f = rec.figures
    assert len(f.idle_causes_s) == 4
    for s, causes in enumerate(f.idle_causes_s):
        assert set(causes) == set(CAUSES)
        idle = f.bubble_fraction[s] * f.makespan_s
        assert sum(causes.values()) == pytest.approx(idle, rel=1e-6, abs=1e-9)
        assert causes["other"] <= 0.01 * f.makespan_s            # the spans explain the gaps
    assert f.idle_causes_s[0]["previous_stage"] == 0 and f.idle_causes_s[0]["transfer"] == 0
    if policy == "wavepp":
        assert all(c["admission"] == 0 for c in f.idle_causes_s)


def test_intervals_tile_each_stages_idle_time_and_sum_to_the_causes() -> None:
    """The one split: its intervals are what the dashboard colours and what the bench sums."""
    engine = SimEngine(SimConfig("llama-3-8b", "h200", 4, block_size=64, kv_blocks=[1000, 200, 1000, 1000]))
    cfg = BenchConfig(parse_workload("reuse90"), [8], ["trtllm-pp"], 48, 0, prompt_tokens=2048)
    rec = run_one(engine, cfg, "trtllm-pp", 8)
    spans = rec.saved().spans
    requests = [s for s in spans if s["n"] == N.REQUEST]
    origin, end = min(s["t0"] for s in requests), max(s["t1"] for s in requests)
    intervals = idle_intervals(spans, 4, origin, end)
    assert sums(intervals, 4) == rec.figures.idle_causes_s
    for s in range(4):
        mine = [iv for iv in intervals if iv.stage == s]
        busy = sorted((x["t0"], x["t1"]) for x in spans if x["n"] == N.EXECUTE and x["a"][N.STAGE] == s)
        cover = sorted([(iv.t0, iv.t1) for iv in mine] + busy)      # idle and busy tile the makespan
        assert cover[0][0] == origin and cover[-1][1] == end
        assert all(a[1] == b[0] for a, b in zip(cover, cover[1:], strict=False))
        assert all(iv.t1 > iv.t0 and iv.cause in CAUSES for iv in mine)
        assert {iv.wave for iv in mine if iv.cause in ("transfer", "previous_stage", "no_work")} - {-1}


def test_a_live_split_settles_exactly_the_idle_time_before_its_horizon() -> None:
    """A server's idle counters (runtime.figures.idle_causes.LiveIdle): spans fed in pieces, settled after
    each; what settled is, per stage, exactly the time up to the last horizon that the stage was
    not executing (no drain), and a settle with nothing new gives nothing."""
    from wavepp.runtime.figures.idle_causes import LiveIdle
    engine = SimEngine(SimConfig("llama-3-8b", "h200", 4, block_size=64, kv_blocks=[1000, 200, 1000, 1000]))
    cfg = BenchConfig(parse_workload("reuse90"), [8], ["trtllm-pp"], 48, 0, prompt_tokens=2048)
    spans = sorted(run_one(engine, cfg, "trtllm-pp", 8).encoded, key=lambda s: s["t1"])
    live = LiveIdle(4, slack_ns=0)
    settled: dict[tuple[int, str], float] = {}
    for i in range(0, len(spans), 40):
        live.add(spans[i:i + 40])
        for key, seconds in live.settle().items():
            assert seconds > 0
            settled[key] = settled.get(key, 0.0) + seconds
    assert live.settle() == {}
    horizon, origin = live.settled_until, live.origin
    assert horizon is not None and origin is not None
    for s in range(4):
        steps = sorted((sp["t0"], sp["t1"]) for sp in spans if sp["n"] == N.EXECUTE and sp["a"][N.STAGE] == s)
        busy, until = 0, origin
        for t0, t1 in steps:                         # busy time inside [origin, horizon], overlaps once
            a, b = max(t0, until), min(t1, horizon)
            if b > a:
                busy += b - a
            until = max(until, t1)
        idle = sum(v for (stage, _), v in settled.items() if stage == s)
        assert idle == pytest.approx((horizon - origin - busy) / 1e9, abs=1e-6)
        assert ("drain" not in {c for (stage, c) in settled if stage == s})
    assert any(c == "ring_full" or c == "admission" for _, c in settled)
