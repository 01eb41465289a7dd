"""The figures computed as spans stream by equal the whole-run figures (DESIGN §7).

``tests/data/runs/main-figures.json.gz`` holds sim runs (wavepp, trtllm-pp, inline admission,
vllm-pp; reuse and documents under a small pool) saved with the figures the whole-run report
computed from all their spans at once. Their spans are fed here to the streaming aggregator one
span, a few spans, or everything at a time, in the order they ended, and every figure must come
out the same - exactly, or to float rounding where a sum's order differs. A fresh sim bench
without the span list (``BenchConfig.keep_spans`` off) must report what one that kept it reports.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from wavepp.runtime.bench.runs import BenchConfig, run_one
from wavepp.runtime.engines.config import SimConfig
from wavepp.runtime.engines.sim.engine import SimEngine
from wavepp.runtime.figures import idle_settle
from wavepp.runtime.figures.report import FigureAccumulator, compute_figures
from wavepp.runtime.runs.runfile import SavedRun, load_runs
from wavepp.runtime.sources.workloads import parse_workload
from wavepp.telemetry import names as N

SAVED = Path(__file__).parent / "data" / "runs" / "main-figures.json.gz"


def same(got: Any, want: Any, where: str) -> None:
    if isinstance(want, dict):
        assert isinstance(got, dict) and set(got) >= set(want), where
        for k, v in want.items():
            same(got[k], v, f"{where}.{k}")
    elif isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want), (where, got, want)
        for i, (g, w) in enumerate(zip(got, want, strict=True)):
            same(g, w, f"{where}[{i}]")
    elif isinstance(want, float) and isinstance(got, float):
        assert math.isclose(got, want, rel_tol=1e-12, abs_tol=1e-12), (where, got, want)
    else:
        assert got == want, (where, got, want)


def streamed(run: SavedRun, chunk: int, settle: bool = False) -> dict[str, Any]:
    acc = FigureAccumulator(settle_stages=int(run.meta["pp"]) if settle else None)
    for i in range(0, len(run.spans), chunk):
        acc.add(run.spans[i:i + chunk])
    meta = {k: run.meta.get(k, "") for k in ("policy", "engine", "model", "hardware", "workload")}
    meta["concurrency"] = run.meta.get("concurrency", 0)
    return acc.figures(int(run.meta["pp"]), meta, stalled=run.figures.get("stalled")).as_dict()


@pytest.fixture(scope="module")
def saved() -> list[SavedRun]:
    return load_runs(SAVED)


@pytest.mark.parametrize("chunk", [1, 7, 10**9])
def test_streamed_figures_equal_the_saved_whole_run_figures(saved: list[SavedRun], chunk: int) -> None:
    assert len(saved) >= 6
    for run in saved:
        same(streamed(run, chunk), run.figures, run.label)


@pytest.mark.parametrize("every", [1, 13, 500])
@pytest.mark.parametrize("chunk", [1, 7])
def test_idle_time_settled_as_the_run_goes_equals_the_whole_run_split(
        saved: list[SavedRun], chunk: int, every: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each gap split as soon as no later span can change it (every ``every`` spans), the steps it
    needed forgotten: the same idle seconds by cause, to the nanosecond, and the same other figures."""
    monkeypatch.setattr(idle_settle, "SETTLE_EVERY", every)
    for run in saved:
        same(streamed(run, chunk, settle=True), run.figures, f"{run.label} settled")


def test_a_settling_aggregator_holds_the_open_gaps_not_the_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """A sim bench's spans streamed in the order they ended: what the idle split holds stays a small part
    of the run's steps, and its figures are the whole run's."""
    monkeypatch.setattr(idle_settle, "SETTLE_EVERY", 200)
    engine = SimEngine(SimConfig("llama-3-8b", "h200", 4, kv_blocks=[3000]))
    cfg = BenchConfig(parse_workload("reuse90"), [8], ["wavepp"], 400, prompt_tokens=4096)
    run = run_one(engine, cfg, "wavepp", 8)
    spans = run.encoded
    steps = sum(1 for s in spans if s["n"] == N.EXECUTE)
    acc = FigureAccumulator(settle_stages=4)
    most = 0
    for i in range(0, len(spans), 10):
        acc.add(spans[i:i + 10])
        held = acc.idle
        most = max(most, sum(map(len, held.executes.values())) + len(held.prepare) + len(held.sends) + len(held.plans))
    assert steps > 1000 and most < steps / 4, (most, steps)
    assert sorted(acc.idle.merged) == [0, 1, 2, 3]
    same(acc.figures(4, run.meta).as_dict(), compute_figures(spans, 4, run.meta).as_dict(), "settled")


def test_the_aggregator_keeps_no_span(saved: list[SavedRun]) -> None:
    """What it holds is numbers and small tuples, not the spans it was given: dropping them after
    :meth:`add` changes nothing."""
    run = saved[0]
    acc = FigureAccumulator()
    for s in run.spans:
        acc.add([dict(s, a=dict(s["a"]))])
    held = [v for v in vars_of(acc) if isinstance(v, dict) and "n" in v and "t0" in v]
    assert held == []


def vars_of(obj: Any) -> list[Any]:
    out = []
    for name in getattr(type(obj), "__slots__", ()) or ():
        out.append(getattr(obj, name, None))
    for v in getattr(obj, "__dict__", {}).values():
        out.append(v)
        if isinstance(v, list):
            out += v[:50]
    return out


def test_a_halt_keeps_the_figures_of_the_spans_that_ended_by_it() -> None:
    """A baseline's source would stop the run at the first halt: spans that end after it do not
    count, as in the whole-run report."""
    def req(rid: str, t0: int, t1: int, halt: int | None = None) -> dict[str, Any]:
        ev = [[N.EVENT_ADMITTED, t0 + 1, {}]] + ([[N.EVENT_HALT, halt, {N.ERROR: "stop"}]] if halt else [])
        return {"n": N.REQUEST, "t0": t0, "t1": t1, "a": {N.REQUEST_ID: rid, N.GEN_AI_INPUT_TOKENS: 10}, "ev": ev}

    def ex(t0: int, t1: int) -> dict[str, Any]:
        return {"n": N.EXECUTE, "t0": t0, "t1": t1, "a": {N.STAGE: 0, N.TOKENS: 10, N.WAVE_ID: 0}, "ev": []}
    spans = [ex(0, 10), req("a", 0, 12), ex(12, 30), req("b", 5, 40, halt=40), ex(40, 60), req("c", 20, 70)]
    meta = {"policy": "p", "engine": "sim", "model": "", "hardware": "", "concurrency": 1, "workload": ""}
    whole = compute_figures(spans, 1, meta).as_dict()
    acc = FigureAccumulator()
    for s in spans:
        acc.add([s])
    same(acc.figures(1, meta).as_dict(), whole, "halted")
    assert whole["stalled"] == "stop" and whole["requests"] == 2


def test_a_bench_without_its_spans_reports_the_same_figures() -> None:
    engine = SimEngine(SimConfig("llama-3-8b", "h200", 4, kv_blocks=[3000]))
    cfg = BenchConfig(parse_workload("reuse90"), [8], ["wavepp"], 40, prompt_tokens=4096)
    kept = run_one(engine, cfg, "wavepp", 8)
    cfg.keep_spans = False
    lean = run_one(engine, cfg, "wavepp", 8)
    assert kept.encoded and not lean.encoded
    want = kept.figures.as_dict()
    got = lean.figures.as_dict()
    same(got, want, "bench")
    same(compute_figures(kept.encoded, 4, kept.meta).as_dict(), kept.figures.as_dict(), "whole run")


def test_a_live_view_holds_the_newest_values_and_still_counts_the_whole_run(saved: list[SavedRun]) -> None:
    """``samples_held``: percentiles of the newest requests and rounds only, memory bounded by that; the
    counts, sums and means stay those of the whole run."""
    run = max(saved, key=lambda r: len(r.spans))
    pp = int(run.meta["pp"])
    meta = {k: run.meta.get(k, "") for k in ("policy", "engine", "model", "hardware", "workload", "concurrency")}
    whole, held = FigureAccumulator(), FigureAccumulator(samples_held=50)
    for i in range(0, len(run.spans), 100):
        whole.add(run.spans[i:i + 100])
        held.add(run.spans[i:i + 100])
        assert len(held.latencies) <= 50 and len(held.rounds) <= 50 and len(held.admission_latency) <= 50
    assert whole.num_completed > 50 and held.samples_dropped == whole.num_completed - 50 > 0
    assert whole.samples_dropped == 0
    w, h = whole.figures(pp, meta), held.figures(pp, meta)
    for name in ("completed", "failed", "requests", "input_tokens_per_s", "admission_rounds",
                 "requests_per_round_mean", "requests_per_round_max", "good_hit_rate", "fallbacks",
                 "admission_critical_path_s_per_request"):
        assert getattr(h, name) == getattr(w, name), name
    newest = sorted(list(whole.latencies)[-50:])
    assert h.prefill_latency_p50_s == pytest.approx((newest[24] + newest[25]) / 2)
    assert h.prefill_latency_p50_s != w.prefill_latency_p50_s


def test_recomputation_forgets_ended_requests_past_its_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    from wavepp.runtime.figures import recomputation
    monkeypatch.setattr(recomputation, "ENDED_HELD", 10)
    tracker = recomputation.RecomputeTracker()
    tracker.add([{"n": N.REQUEST, "t0": i, "t1": i + 1, "a": {N.REQUEST_ID: f"r{i}"}} for i in range(100)])
    assert list(tracker._last_fallback) == [f"r{i}" for i in range(90, 100)]
