"""Metrics: the Prometheus endpoint is scraped over HTTP and parsed with prometheus_client's parser;
every counter agrees with the run's figures, also when span sampling exports nothing."""

from __future__ import annotations

import math
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.telemetry.helpers import small_run
from wavepp.store.records import StageStatus, StatusSnapshot
from wavepp.telemetry.config import TelemetryConfig
from wavepp.telemetry.metrics import WaveppMetrics


def scrape(port: int) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as reply:
        assert reply.status == 200
        assert reply.headers["Content-Type"].startswith("text/plain")
        text = reply.read().decode()
    out: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out.setdefault(sample.name, {})[tuple(sorted(sample.labels.items()))] = sample.value
    return out


def value(samples: dict[tuple[tuple[str, str], ...], float], **labels: str) -> float:
    want = {k: str(v) for k, v in labels.items()}
    return sum(v for k, v in samples.items() if want.items() <= dict(k).items())


@pytest.fixture
def metrics() -> WaveppMetrics:
    m = WaveppMetrics()
    yield m
    m.close()


@pytest.mark.parametrize("ratio", [1.0, 0.0])
def test_scraped_metrics_match_the_figures(metrics: WaveppMetrics, ratio: float) -> None:
    """Sampling thins export only: at ratio 0 the counters are exactly those of the figures."""
    record = small_run(TelemetryConfig(sampler="parentbased_traceidratio", ratio=ratio), metrics)
    f = record.figures
    port = metrics.serve(0)
    m = scrape(port)
    pol = {"policy": "wavepp"}
    assert f.makespan_s and f.input_tokens_per_s and f.computed_tokens_per_s and f.bubble_fraction
    assert value(m["wavepp_requests_total"], outcome="completed", **pol) == f.completed == 24
    assert value(m["wavepp_input_tokens_total"], **pol) == pytest.approx(f.input_tokens_per_s * f.makespan_s)
    assert value(m["wavepp_computed_tokens_total"], **pol) == pytest.approx(f.computed_tokens_per_s * f.makespan_s)
    assert value(m["wavepp_prefill_latency_seconds_count"], **pol) == f.completed
    assert value(m["wavepp_prefill_latency_seconds_bucket"], le="+Inf", **pol) == f.completed
    assert value(m["wavepp_admission_interval_seconds_count"], **pol) == f.admission_rounds - 1
    assert value(m["wavepp_waves_total"], **pol) == f.waves
    shared = value(m["wavepp_shared_in_flight_tokens_total"], **pol)         # sharing in flight, apart
    assert shared == pytest.approx((f.sharing_in_flight or 0.0) * f.input_tokens_per_s * f.makespan_s)
    assert shared <= value(m["wavepp_reused_tokens_total"], **pol)
    reusable = value(m["wavepp_reusable_tokens_total"], **pol)                # good-hit, from the counters alone
    assert reusable > 0 and value(m["wavepp_reused_from_cache_tokens_total"], **pol) / reusable == \
        pytest.approx(f.good_hit_rate)
    assert value(m["wavepp_reused_from_cache_tokens_total"], **pol) + shared == \
        value(m["wavepp_reused_tokens_total"], **pol)
    for stage, bubble in enumerate(f.bubble_fraction):
        busy = value(m["wavepp_stage_busy_seconds_total"], stage=str(stage), **pol)
        assert busy == pytest.approx((1 - bubble) * f.makespan_s)
        idle = value(m["wavepp_stage_idle_seconds_total"], stage=str(stage), **pol)
        assert idle == pytest.approx(f.makespan_s - busy, rel=1e-6)          # the causes sum to the idle time
        assert value(m["wavepp_stage_step_seconds_count"], stage=str(stage), step="execute", **pol) == f.waves
        assert 0 < value(m["wavepp_stage_busy_ratio"], stage=str(stage), **pol) <= 1
    assert sum(1 for k in m["wavepp_stage_idle_seconds_total"] if dict(k)["stage"] == "0") >= 2   # by cause
    assert value(m["wavepp_wave_budget_tokens"], **pol) > 0
    # Histogram buckets are cumulative and end at the count.
    buckets = sorted((float(dict(k)["le"]), v) for k, v in m["wavepp_stage_step_seconds_bucket"].items()
                     if dict(k)["stage"] == "0" and dict(k)["step"] == "execute")
    assert all(a[1] <= b[1] for a, b in zip(buckets, buckets[1:], strict=False)) and math.isinf(buckets[-1][0])


def test_render_is_exposition_text_for_any_http_server(metrics: WaveppMetrics) -> None:
    """The API another server mounts at GET /metrics: bytes and a content type, nothing served."""
    small_run(TelemetryConfig(), metrics, requests=8)
    body, content_type = metrics.render()
    assert content_type.startswith("text/plain; version=")
    names = {f.name for f in text_string_to_metric_families(body.decode())}
    assert {"wavepp_requests", "wavepp_prefill_latency_seconds", "wavepp_stage_step_seconds",
            "wavepp_stage_idle_seconds"} <= names


def test_status_snapshots_become_queue_and_kv_gauges(metrics: WaveppMetrics) -> None:
    metrics.observe_status("wavepp", StatusSnapshot(1, waiting=3, active=5, stages=(
        StageStatus(0, capacity=98, cached=10, free=80, leases=2, escrowed=6, evictions=0),
        StageStatus(1, capacity=86, cached=12, free=70, leases=2, escrowed=4, evictions=0))))
    m = scrape(metrics.serve(0))
    assert value(m["wavepp_requests_waiting"], policy="wavepp") == 3
    assert value(m["wavepp_requests_active"], policy="wavepp") == 5
    assert value(m["wavepp_kv_blocks"], stage="1", state="free") == 70
    assert value(m["wavepp_kv_blocks"], stage="0", state="escrowed") == 6
    assert value(m["wavepp_kv_leases"], stage="0") == 2


def test_a_run_feeds_the_queue_and_kv_gauges_from_its_status(metrics: WaveppMetrics) -> None:
    record = small_run(TelemetryConfig(), metrics, requests=8)
    m = scrape(metrics.serve(0))
    last = record.loop.status[-1]
    for st in last.stages:
        for state, blocks in (("cached", st.cached), ("free", st.free), ("escrowed", st.escrowed)):
            assert value(m["wavepp_kv_blocks"], stage=str(st.stage), state=state) == blocks
    assert value(m["wavepp_kv_blocks"], stage="0", state="free") > 0
    assert value(m["wavepp_requests_waiting"], policy="wavepp") == last.waiting
    # Stage completion has its own step (a span per stage for each wave that finishes requests).
    assert value(m["wavepp_stage_step_seconds_count"], step="complete", stage="1") > 0


def test_after_a_policy_change_points_carry_the_policy_that_runs(metrics: WaveppMetrics) -> None:
    """The `policy` knob changed mid-run: waves, steps and requests after the change are counted under
    the new policy, those before under the old one, none lost; the old busy fraction stops."""
    import asyncio

    from wavepp.runtime.control.knobs import Knobs
    from wavepp.runtime.engines.config import SimConfig
    from wavepp.runtime.engines.sim.clock import run_virtual
    from wavepp.runtime.engines.sim.engine import SimEngine
    from wavepp.runtime.loop import LoopConfig, PipelineLoop
    from wavepp.runtime.sources.workloads import Workload, parse_workload
    from wavepp.telemetry import names as N

    engine = SimEngine(SimConfig("llama-3-8b", "h200", 2, kv_blocks=[2000]))
    parts = engine.build()
    tel = engine.telemetry(metrics=metrics)
    workload = Workload(parse_workload("reuse90"), 48, 2048, 64, engine.vocab_size, 0)
    knobs = Knobs(max_wave_tokens=4096, min_wave_tokens=2048)

    async def main() -> None:
        loop = PipelineLoop(parts, parts.store, knobs, workload, tel, LoopConfig(4))
        run = asyncio.create_task(loop.run())
        while loop.num_finished < 20:        # mid-run: past the warm-up, some measured waves done
            await asyncio.sleep(0.001)
        loop.set_knobs(knobs.replace(policy="trtllm-pp"))
        await run

    run_virtual(main())
    plans = [s for s in tel.finished_spans() if s.name == N.WAVE_PLAN and (s.attributes or {}).get(N.TOKENS)]
    by_policy = {p: sum(1 for s in plans if s.attributes[N.POLICY] == p) for p in ("wavepp", "trtllm-pp")}
    assert by_policy["wavepp"] >= 6 and by_policy["trtllm-pp"] > 0
    m = scrape(metrics.serve(0))
    for policy, waves in by_policy.items():
        assert value(m["wavepp_waves_total"], policy=policy) == waves
    assert value(m["wavepp_requests_total"], outcome="completed") == 48
    assert value(m["wavepp_requests_total"], policy="trtllm-pp", outcome="completed") > 0
    assert value(m["wavepp_stage_busy_ratio"], policy="wavepp") == 0                    # no longer reported
    assert value(m["wavepp_stage_busy_ratio"], policy="trtllm-pp") > 0


def test_rare_event_counters_are_exported_at_zero_and_the_service_is_named(metrics: WaveppMetrics,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """A run with no fallback, no eviction and no dropped span still exports those counters, at 0,
    one series per stage and per exporter (Prometheus convention: an alert on rate() sees 0, not
    nothing); the process's target_info names the service as its spans do."""
    import wavepp.telemetry.metrics as M

    record = small_run(TelemetryConfig(otlp_endpoint="http://127.0.0.1:1"), metrics, requests=8)
    assert record.figures.fallbacks == 0 and record.figures.evictions == [0, 0]
    m = scrape(metrics.serve(0))
    assert m["wavepp_fallbacks_total"] == {(("policy", "wavepp"),): 0.0}
    assert m["wavepp_kv_evictions_total"] == {(("policy", "wavepp"), ("stage", "0")): 0.0,
                                              (("policy", "wavepp"), ("stage", "1")): 0.0}
    assert (("exporter", "otlp"),) in m["wavepp_spans_dropped_total"]
    monkeypatch.setattr(M, "_PROCESS_METRICS", [])
    process = M.process_metrics()
    try:
        small_run(TelemetryConfig(), process, requests=4)
        body = process.render()[0].decode()
    finally:
        process.close()
    assert 'service_name="wavepp"' in body and "unknown_service" not in body, body[:400]


def test_a_virtual_time_run_is_dated_from_its_real_start() -> None:
    """Its spans start when the run did."""
    import time

    before = time.time_ns()
    record = small_run(TelemetryConfig(), None, requests=4)
    first = min(s["t0"] for s in record.encoded)
    assert abs(first - before) < 3600 * 1_000_000_000, (first, before)    # virtual seconds on from the start
