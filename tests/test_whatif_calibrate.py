"""A real-time run's what-if replay: the CPU clock charges the loop's own work, the fits read the run's
spans, and a preview of a real-time run replays on that clock with the fit in its description."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Any

import pytest

from wavepp.runtime.bench.runs import BenchConfig, run_one
from wavepp.runtime.control.knobs import Knobs
from wavepp.runtime.engines.config import SimConfig
from wavepp.runtime.engines.sim.clock import CpuClockLoop, measure_wake, run_virtual
from wavepp.runtime.engines.sim.costmodel import ChunkShape
from wavepp.runtime.engines.sim.engine import SimEngine
from wavepp.runtime.figures.report import compute_figures
from wavepp.runtime.sources.workloads import parse_workload
from wavepp.runtime.whatif import preview as W
from wavepp.runtime.whatif.calibrate import describe, fit_cpu_scale, fit_steps
from wavepp.runtime.whatif.report import replay_check, spread_line
from wavepp.telemetry import names as N

KNOBS = Knobs(max_wave_tokens=8192, min_wave_tokens=4096)


def burn(seconds: float) -> None:
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


# ---- the CPU clock --------------------------------------------------------------------------------
@pytest.mark.parametrize("scale", [1.0, 3.0])
def test_the_cpu_clock_charges_the_loops_work_and_skips_sleeps(scale: float) -> None:
    async def main() -> tuple[float, float, float]:
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        burn(0.05)
        t1 = loop.time()
        await asyncio.sleep(10.0)            # a modelled step: no real waiting
        return t0, t1, loop.time()

    wall = time.monotonic()
    t0, t1, t2 = run_virtual(main(), cpu_scale=scale)
    assert time.monotonic() - wall < 5.0
    assert t1 - t0 == pytest.approx(0.05 * scale, rel=0.5)
    assert t2 - t1 >= 10.0                   # the sleep passed, and the loop's own CPU after it
    assert t2 - t1 < 10.0 + 0.5 * scale


def test_a_timer_due_during_cpu_work_fires_late_as_on_a_real_loop() -> None:
    """A step that should end while the loop is busy ends when the loop gets to it."""
    async def main() -> float:
        loop = asyncio.get_running_loop()
        woke = loop.create_future()
        loop.call_later(0.01, lambda: woke.set_result(loop.time()))
        await asyncio.sleep(0)
        burn(0.06)                           # the loop is busy past the timer's due time
        return await woke

    assert run_virtual(main(), cpu_scale=1.0) >= 0.05


def test_an_idle_wait_is_rounded_up_to_the_millisecond_as_epoll_does_and_takes_the_wake_up_time() -> None:
    loop = CpuClockLoop(1.0, wake_s=0.0002)
    try:
        assert loop.idle_wait(0.0003) == pytest.approx(0.0012)
        assert loop.idle_wait(0.002) == pytest.approx(0.0022)
    finally:
        loop.close()

    async def main() -> float:
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        await asyncio.sleep(0.0025)                      # nothing else to run: the loop idles
        return loop.time() - t0

    assert 0.003 <= run_virtual(main(), cpu_scale=1.0, wake_s=0.0005) < 0.0035 + 0.02
    wake = measure_wake(samples=20)
    assert 0.0 <= wake < 0.05


def test_the_virtual_clock_ignores_cpu_work() -> None:
    async def main() -> float:
        burn(0.03)
        return asyncio.get_running_loop().time()

    assert run_virtual(main()) == 0.0


def test_the_cpu_clock_refuses_a_bad_scale() -> None:
    async def nothing() -> None:
        return None

    coro = nothing()
    with pytest.raises(ValueError, match="must be positive"):
        run_virtual(coro, cpu_scale=0.0)
    coro.close()
    with pytest.raises(ValueError, match="unknown clock"):
        SimEngine(SimConfig("llama-3-8b", "h200", 4, kv_blocks=[100], clock="sundial"))
    with pytest.raises(ValueError, match="step fit"):
        SimEngine(SimConfig("llama-3-8b", "h200", 4, kv_blocks=[100], step_fit=[(1.0, 0.0)]))


# ---- the fits -------------------------------------------------------------------------------------
def cpu_span(wall_s: float, cpu_s: float, name: str = N.WAVE_PLAN) -> dict[str, Any]:
    return {"n": name, "t0": 0, "t1": round(wall_s * 1e9), "a": {N.LOOP_CPU_S: cpu_s}}


def test_cpu_scale_is_the_median_wall_over_cpu_of_the_loops_spans() -> None:
    spans = [cpu_span(0.002, 0.001) for _ in range(20)] + [cpu_span(0.050, 0.001, N.ADMISSION_ROUND)] * 3
    assert fit_cpu_scale(spans) == pytest.approx(2.0)           # rounds that waited on I/O do not move it
    assert fit_cpu_scale(spans[:5]) is None                      # too few to say
    assert fit_cpu_scale([cpu_span(0.001, 1e-6)] * 20) is None   # timer noise, not loop work
    assert fit_cpu_scale([{"n": N.WAVE_PLAN, "t0": 0, "t1": 5, "a": {}}] * 20) is None   # an older run


class LinearCost:
    """step time = 1 ms per token (stages alike)."""

    num_stages = 2

    def step_time(self, stage: int, chunks: Sequence[ChunkShape]) -> float:
        return sum(c.tokens for c in chunks) * 1e-3


def step(stage: int, tokens: int, seconds: float) -> dict[str, Any]:
    return {"n": N.EXECUTE, "t0": 0, "t1": round(seconds * 1e9),
            "a": {N.STAGE: stage, N.CHUNK_STARTS: [0], N.CHUNK_TOKENS: [tokens]}}


def test_steps_are_fitted_as_scale_and_offset_per_stage() -> None:
    sizes = [64, 128, 256, 512, 768, 1024] * 3
    spans = [step(0, n, 0.5 * n * 1e-3 + 0.010) for n in sizes] + [step(1, n, 2.0 * n * 1e-3) for n in sizes]
    fit = fit_steps(spans, LinearCost(), 2)  # type: ignore[arg-type]
    assert fit is not None
    (a0, b0), (a1, b1) = fit
    assert (a0, b0) == (pytest.approx(0.5), pytest.approx(0.010))
    assert (a1, b1) == (pytest.approx(2.0), pytest.approx(0.0, abs=1e-9))
    assert describe(1.25, fit, 2e-4) == \
        "the run's loop spans 1.25x their CPU time, wake-up 0.20 ms, steps x0.50+10.0ms / x2.00"
    assert describe(None, None, 1e-3) == "wake-up 1.00 ms"


def test_steps_of_one_size_or_an_unphysical_line_fit_a_ratio() -> None:
    same = [step(0, 512, 0.256 + 0.001 * (i % 2)) for i in range(10)]
    fit = fit_steps(same, LinearCost(), 2)  # type: ignore[arg-type]
    assert fit is not None and fit[0][1] == 0.0 and fit[0][0] == pytest.approx(0.5, rel=0.01)
    assert fit[1] == (1.0, 0.0)                                   # stage 1 ran no step here
    falling = [step(0, n, 0.2 - n * 1e-4) for n in (100, 200, 400, 800, 1000) * 2]   # bigger steps faster
    fit = fit_steps(falling, LinearCost(), 2)  # type: ignore[arg-type]
    assert fit is not None and fit[0][1] == 0.0
    assert fit_steps([], LinearCost(), 2) is None  # type: ignore[arg-type]


def figures(busy: float, makespan: float, requests: int = 1) -> Any:
    """One stage busy ``busy`` s of ``makespan`` s, ``requests`` requests of 100 tokens all ending at the end."""
    spans = [{"n": N.REQUEST, "t0": 0, "t1": round(makespan * 1e9), "a": {N.GEN_AI_INPUT_TOKENS: 100}}] * requests
    spans += [{"n": N.EXECUTE, "t0": 0, "t1": round(busy * 1e9), "a": {N.STAGE: 0, N.TOKENS: 100}}]
    return compute_figures(spans, 1, {"policy": "wavepp", "engine": "sim", "model": "m", "hardware": "h",
                                      "concurrency": 1, "workload": "w"})


def test_predictions_are_anchored_on_what_the_run_did() -> None:
    """The replay of the current knobs read 2x the run's throughput and 0.2 more efficiency: every
    prediction's rates and latencies are moved by that ratio, efficiency stays as replayed; a run that
    says too little leaves them as the replays gave them."""
    current, proposed = figures(0.8, 1.0, 32), figures(0.9, 0.5, 32)
    observed = figures(1.2, 2.0, 32)                        # half the rate, efficiency 0.6 against 0.8
    preds = [W.Prediction({}, current, 1.0), W.Prediction({}, proposed, 1.0)]
    now, then = W.anchored(preds, current, observed)
    assert now.figures.input_tokens_per_s == pytest.approx(observed.input_tokens_per_s)
    assert then.figures.input_tokens_per_s == pytest.approx(proposed.input_tokens_per_s / 2)
    assert then.figures.pipeline_efficiency == proposed.pipeline_efficiency      # a ratio: the speed cancels
    assert now.figures.pipeline_efficiency == current.pipeline_efficiency
    assert then.figures.prefill_latency_p95_s == pytest.approx(proposed.prefill_latency_p95_s * 2)
    assert then.raw is proposed and then.replayed is proposed and preds[1].replayed is proposed
    assert W.anchored(preds, current, figures(1.2, 2.0, 4)) == preds    # 4 requests say too little
    assert W.anchored(preds, current, None) == preds


def test_a_prediction_is_the_replay_with_the_median_throughput() -> None:
    slow, mid, stalled = figures(0.5, 1.0), figures(0.5, 0.8), figures(0.5, 5.0)
    assert W.median_run([slow, mid, stalled]) is slow        # one that stalled does not drag it down
    assert W.median_run([mid, slow]) is slow                  # an even count: the lower middle one
    assert W.median_run([mid]) is mid


# ---- a real-time run replayed -----------------------------------------------------------------------
@pytest.fixture(scope="module")
def realtime_run() -> Any:
    engine = SimEngine(SimConfig("llama-3-8b", "h200", 4, kv_blocks=[3000], clock="wall"))
    cfg = BenchConfig(parse_workload("reuse90"), [16], ["wavepp"], 48, prompt_tokens=4096, knobs=KNOBS)
    return run_one(engine, cfg, "wavepp", 16, telemetry="off")


def test_a_real_time_run_records_its_loops_cpu_and_is_replayed_on_the_cpu_clock(realtime_run: Any) -> None:
    kinds = {s["n"] for s in realtime_run.encoded if N.LOOP_CPU_S in s["a"]}
    assert kinds == {N.ADMISSION_ROUND, N.WAVE_PLAN, N.MATERIALIZE}
    assert realtime_run.meta["sim"]["clock"] == "wall"
    spec = W.sim_spec(realtime_run.meta)
    assert (spec.clock, spec.repeats) == ("cpu", W.CPU_CLOCK_REPEATS)
    replay = W.replay_of(realtime_run.encoded, realtime_run.meta, None)
    fitted = W.calibrated(replay, spec)
    assert fitted.cpu_scale == 1.0 and f"{fit_cpu_scale(replay.observed):.2f}x their CPU time" in fitted.fit
    assert fitted.step_fit is None                                # a sim's steps are its model
    current = W.knobs_at_end(realtime_run.meta, [])
    result = W.preview(replay, spec, current, current.replace(ring=1), time_limit_s=300)
    assert "the loop's CPU time charged (the run's loop spans" in result.sim and "median of 3 replays" in result.sim
    assert len(result.current.throughputs) == len(result.proposed.throughputs) == W.CPU_CLOCK_REPEATS
    # the figures count the requests of the 48 between a margin of 6 (an eighth) at each end
    assert all(48 // 2 < p.figures.completed <= 48 - 2 * 6 for p in (result.current, result.proposed))
    assert spread_line(result).endswith("over 3 replays each")
    assert "anchored on the run" in replay_check(result.current, W.observed_in(replay, 4))
    # one wave in flight on four stages cannot beat the run's own ring of eight
    assert result.proposed.figures.input_tokens_per_s < result.current.figures.input_tokens_per_s


def test_a_virtual_time_run_is_replayed_by_the_same_sim() -> None:
    engine = SimEngine(SimConfig("llama-3-8b", "h200", 4, kv_blocks=[3000]))
    meta = {"engine": "sim", "pp": 4, "capacities": [3000] * 4, "block_size": 64, "sim": engine.replay_args}
    spec = W.sim_spec(meta)
    assert (spec.clock, spec.repeats, spec.fit) == ("virtual", 1, "")
    old = {**meta, "sim": {k: v for k, v in engine.replay_args.items() if k != "clock"}}   # saved before clocks
    assert W.sim_spec(old).clock == "virtual"
    assert W.sim_spec({**meta, "sim": {**engine.replay_args, "clock": None, "realtime": True}}).clock == "cpu"


def test_a_suggestion_that_won_the_screening_by_luck_is_dropped_when_replayed_again(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Suggest screens with one replay per setting; the winner is replayed again beside the current
    knobs, and proposed only if it still wins."""
    from wavepp.runtime.whatif import suggest as S
    current = Knobs(max_wave_tokens=8192, min_wave_tokens=4096, ring=8)
    lucky = current.replace(ring=16)

    def prediction(knobs: Knobs, makespan: float) -> W.Prediction:
        return W.Prediction(knobs.as_dict(), figures(0.5, makespan, 32), 0.1)

    screened = {lucky: 0.8}                                     # every other setting: makespan 1.0
    monkeypatch.setattr(S, "calibrated", lambda replay, spec: spec)
    monkeypatch.setattr(S, "predict", lambda replay, spec, knobs, deadline, label:
                        prediction(knobs, screened.get(knobs, 1.0)))
    again = {current: 1.0, lucky: 1.05}                         # replayed three times: no better after all
    monkeypatch.setattr(S, "predict_each", lambda replay, spec, settings, deadline:
                        [prediction(k, again[k]) for k, _ in settings])
    spec = W.SimSpec("sim", "llama-3-8b", "h200", 4, 64, (3000,) * 4, clock="cpu", repeats=3)
    replay = W.Replay(tuple(W.Arrival(i * 0.01, 4096, 0, i * 0.01 + 0.1) for i in range(16)), 4, False)
    result = S.suggest(replay, spec, current, S.Goal("throughput"))
    assert result.changes == {} and result.best is result.current
    again[lucky] = 0.9                                          # ... and now it does win again
    result = S.suggest(replay, spec, current, S.Goal("throughput"))
    assert result.changes == {"ring": 16}
