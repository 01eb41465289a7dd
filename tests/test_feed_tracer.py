"""A run whose spans only feed its figures gets ``telemetry.feed_tracer``'s spans; they must hand the
feed what the SDK's spans would have (span ids aside), and a bench must report the same figures
either way."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.trace import Status, StatusCode

from tests.test_figure_stream import same
from wavepp.runtime.bench.runs import BenchConfig, run_one
from wavepp.runtime.engines.config import SimConfig
from wavepp.runtime.engines.sim.engine import SimEngine
from wavepp.runtime.sources.workloads import parse_workload
from wavepp.telemetry import metrics as M
from wavepp.telemetry import names as N
from wavepp.telemetry.config import TelemetryConfig
from wavepp.telemetry.feed import SpanFeed
from wavepp.telemetry.feed_tracer import FeedTracer
from wavepp.telemetry.metrics import WaveppMetrics
from wavepp.telemetry.ring import SpanRing
from wavepp.telemetry.setup import Telemetry
from wavepp.telemetry.span_codec import encode

BENCH_MODE = TelemetryConfig.from_env().with_flags("on")


@pytest.fixture(autouse=True)
def no_process_metrics(monkeypatch: pytest.MonkeyPatch) -> None:
    """Once anything in the process asked for its metrics, every run is metered (its spans the SDK's):
    these tests start from a process that has none, as a bench does."""
    monkeypatch.setattr(M, "_PROCESS_METRICS", [])


def telemetry(out: list[dict[str, Any]], keep: bool) -> Telemetry:
    clock = [0.0]

    def now() -> float:
        clock[0] += 0.001
        return clock[0]
    feed = SpanFeed(out.extend, batch=1)
    return Telemetry(now, epoch_ns=1_000, keep=keep, run_id="run-1", feed=feed, config=BENCH_MODE, metrics=None)


def script(tel: Telemetry) -> None:
    """Every span call the runtime makes, and the SDK's edge cases: attribute values it drops or
    rewrites, status rules, calls after the end, links to valid and invalid contexts."""
    request = tel.start("wavepp.request", {"wavepp.request.id": "r-1", "wavepp.tokens": 512}, root=True)
    with tel.span("wavepp.admit", {"ids": ("a", "b"), "none": None}, parent=request) as admit:
        admit.set_attribute("wavepp.hit", 3)
        admit.set_attributes({"list": [1, 2], "flag": True, "ratio": 0.25})
        tel.event(admit, "knobs", {"ring": 4, "names": ("x",)})
        with tel.span("wavepp.lookup", cpu=False) as lookup:
            lookup.set_status(Status(StatusCode.ERROR, "miss"))
    with pytest.raises(RuntimeError), tel.span("wavepp.pin", parent=request):
        raise RuntimeError("pool closed")
    wave = tel.start("wavepp.wave", {"wavepp.wave.id": 0}, root=True, link_to=[request])
    wave.add_link(request.get_span_context())
    wave.add_link(trace.INVALID_SPAN.get_span_context())
    wave.set_status(StatusCode.OK)
    tel.end(wave, error="ignored: OK is final")
    wave.set_attribute("after", 1)
    tel.end(wave)
    assert request.is_recording() and not wave.is_recording()
    tel.end(request, error="cancelled")
    tel.shutdown()


def canonical(spans: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The spans with their ids (span, trace, parent, links) renumbered in order of appearance."""
    names: dict[str, str] = {}

    def name(raw: str) -> str:
        return names.setdefault(raw, f"#{len(names)}")
    out = []
    for s in spans:
        c = dict(s, id=name(s["id"]), tr=name(s["tr"]))
        if "p" in s:
            c["p"] = name(s["p"])
        if "ln" in s:
            c["ln"] = [name(x) for x in s["ln"]]
        out.append(c)
    return out


def test_feed_spans_carry_what_the_sdks_spans_carry(caplog: pytest.LogCaptureFixture) -> None:
    sdk: list[dict[str, Any]] = []
    lean: list[dict[str, Any]] = []
    with_list = telemetry(sdk, keep=True)
    without = telemetry(lean, keep=False)
    assert not isinstance(with_list.tracer, FeedTracer) and isinstance(without.tracer, FeedTracer)
    with caplog.at_level(logging.WARNING):
        script(with_list)
        script(without)
    assert [encode(s) for s in with_list.finished_spans()] == sdk
    assert canonical(lean) == canonical(sdk)
    assert [s["n"] for s in lean] == ["wavepp.lookup", "wavepp.admit", "wavepp.pin", "wavepp.wave", "wavepp.request"]
    assert lean[1]["a"]["ids"] == ["a", "b"] and lean[1]["a"]["none"] is None
    assert lean[2]["err"] == "pool closed" and "err" not in lean[3] and lean[4]["err"] == "cancelled"
    assert lean[3]["ln"] == [lean[4]["id"], lean[4]["id"]] and "after" not in lean[3]["a"]


def test_attribute_values_are_cleaned_by_the_sdks_rules() -> None:
    spans: dict[bool, list[dict[str, Any]]] = {True: [], False: []}
    for keep, out in spans.items():
        tel = telemetry(out, keep)
        with tel.span("s", {"map": {"a": [1, 2]}, "bytes": b"xy", "odd": object()}) as span:
            span.set_attribute("mixed", [1, "a", None])
            span.set_attribute("", 1)
            span.set_attributes({"nested": [[1], [2]], "none": None})
        tel.shutdown()
    assert spans[False][0]["a"] == spans[True][0]["a"]
    assert spans[False][0]["a"]["map"] == {"a": (1, 2)} and "" not in spans[False][0]["a"]


@pytest.mark.parametrize("reader", ["keep", "metrics", "ring"])
def test_any_other_reader_of_spans_gets_the_sdks(reader: str) -> None:
    feed = SpanFeed(lambda spans: None)
    options: dict[str, Any] = {"keep": reader == "keep", "feed": feed, "config": BENCH_MODE,
                               "metrics": WaveppMetrics() if reader == "metrics" else None,
                               "ring": SpanRing(16) if reader == "ring" else None}
    tel = Telemetry(lambda: 0.0, epoch_ns=0, **options)
    assert not isinstance(tel.tracer, FeedTracer)
    tel.shutdown()


def comparable(spans: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A run's spans without what two runs never share: ids (renumbered), the run's id, CPU times,
    the real start its virtual times count from."""
    out = canonical(spans)
    start = min(s["t0"] for s in out)
    for s in out:
        s.pop("run", None)
        s["t0"], s["t1"] = s["t0"] - start, s["t1"] - start
        if "ev" in s:
            s["ev"] = [[name, t - start, a] for name, t, a in s["ev"]]
        s["a"] = {k: v for k, v in s["a"].items() if k != N.LOOP_CPU_S}
    return out


@pytest.mark.parametrize(("workload", "policy"), [("docs:6", "wavepp"), ("reuse90", "vllm-pp"),
                                                  ("sessions:4", "sglang-pp")])
def test_a_bench_records_the_same_spans_and_figures_either_way(workload: str, policy: str) -> None:
    """The same seeded run twice: metered (metrics read the spans too: the SDK's), and not (spans
    made for the feed): the same spans in the same order, and the same figures."""
    engine = SimEngine(SimConfig("llama-3-8b", "h200", 4, kv_blocks=[1500]))
    cfg = BenchConfig(parse_workload(workload), [16], [policy], 48, prompt_tokens=2048, metrics=WaveppMetrics())
    sdk = run_one(engine, cfg, policy, 16)
    cfg.metrics = None
    fed = run_one(engine, cfg, policy, 16)
    assert len(sdk.encoded) == sdk.meta["spans"] > 0 and not sdk.loop.num_failed
    assert comparable(fed.encoded) == comparable(sdk.encoded)
    same(fed.figures.as_dict(), sdk.figures.as_dict(), f"{workload} {policy}")


def test_two_runs_never_share_a_trace_id() -> None:
    """Saved runs' traces meet in one collector (``wavepp trace export``): their ids must differ
    as the SDK's random ones do; within a run a child carries its parent's."""
    runs: list[list[dict[str, Any]]] = [[], []]
    for out in runs:
        tel = telemetry(out, keep=False)
        root = tel.start("wavepp.request", root=True)
        with tel.span("wavepp.admit", parent=root):
            pass
        tel.end(root)
        tel.shutdown()
    (child_a, root_a), (child_b, root_b) = runs
    assert child_a["tr"] == root_a["tr"] and child_b["tr"] == root_b["tr"]
    assert root_a["tr"] != root_b["tr"] and int(root_a["tr"], 16) >> 64
