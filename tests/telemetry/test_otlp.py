"""OTLP export: a receiver inside the suite decodes what the exporters send (opentelemetry-proto) and
checks names, parentage, links and attributes; sampling thins export only; an unreachable endpoint
neither stops nor slows a run (logged once, drops counted)."""

from __future__ import annotations

import logging
import time
from concurrent import futures
from typing import Any

import grpc
import pytest
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc

from tests.telemetry.helpers import small_run
from wavepp.telemetry import names as N
from wavepp.telemetry.config import TelemetryConfig
from wavepp.telemetry.receiver import OtlpReceiver


def attrs(span: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for kv in span.attributes:
        v = kv.value
        kind = v.WhichOneof("value")
        out[kv.key] = [x.string_value or x.int_value for x in v.array_value.values] if kind == "array_value" \
            else getattr(v, kind)
    return out


@pytest.fixture
def receiver() -> OtlpReceiver:
    r = OtlpReceiver()
    yield r
    r.close()


def test_every_span_reaches_a_collector_over_http(receiver: OtlpReceiver) -> None:
    record = small_run(TelemetryConfig(mode="otlp", otlp_endpoint=receiver.endpoint))
    got = receiver.spans()
    assert len(got) == len(record.encoded) == record.meta["spans"]
    assert record.meta["spans_dropped"] == {"otlp": 0}
    resource = got[0][0]
    assert resource["service.name"] == {"stringValue": "wavepp"}
    assert resource[N.RUN_ID] == {"stringValue": record.run.id}
    by_id = {s.span_id: s for _, s in got}
    names = {s.name for s in by_id.values()}
    assert {N.REQUEST, N.ADMISSION_ROUND, N.HINT_LOOKUP, N.LEASE, N.ESCROW, N.WAVE_PLAN, N.MATERIALIZE,
            N.EXECUTE, N.SEND} <= names
    # Parentage: lookup, lease and escrow are children of their admission round, in its trace.
    for s in by_id.values():
        if s.name in (N.HINT_LOOKUP, N.LEASE, N.ESCROW):
            parent = by_id[s.parent_span_id]
            assert parent.name == N.ADMISSION_ROUND and parent.trace_id == s.trace_id
    # A wave span (its own trace) links to the request span of every chunk it carries (each request
    # its own trace) and parents its stage steps: materialize, execute, send on each stage, and the
    # stage completions of the requests it finishes.
    requests = {attrs(s)[N.REQUEST_ID]: s for s in by_id.values() if s.name == N.REQUEST}
    waves = {attrs(s)[N.WAVE_ID]: s for s in by_id.values() if s.name == N.WAVE}
    assert len(waves) == record.figures.waves
    steps: dict[int, list[tuple[str, int]]] = {w: [] for w in waves}
    for s in by_id.values():
        if s.name in (N.MATERIALIZE, N.EXECUTE, N.SEND, N.COMPLETE):
            parent = by_id[s.parent_span_id]
            assert parent.name == N.WAVE and parent.trace_id == s.trace_id
            assert attrs(parent)[N.WAVE_ID] == attrs(s)[N.WAVE_ID]
            assert parent.start_time_unix_nano <= s.start_time_unix_nano <= s.end_time_unix_nano \
                <= parent.end_time_unix_nano
            steps[attrs(s)[N.WAVE_ID]].append((s.name, attrs(s)[N.STAGE]))
    for wave_id, w in waves.items():
        assert not w.parent_span_id
        linked = {(link.trace_id, link.span_id) for link in w.links}
        carried = set(attrs(w)[N.REQUEST_IDS])
        assert linked == {(requests[r].trace_id, requests[r].span_id) for r in carried}
        assert {(N.EXECUTE, 0), (N.EXECUTE, 1), (N.MATERIALIZE, 0), (N.MATERIALIZE, 1), (N.SEND, 0)} \
            <= set(steps[wave_id])
    completions = [st for w in steps.values() for st in w if st[0] == N.COMPLETE]
    assert {st for _, st in completions} == {0, 1} and len(completions) % 2 == 0
    # The request span: GenAI input tokens, reuse boundary, computed and reused tokens, admission
    # timings, outcome.
    done = [s for s in requests.values() if s.status.code != 2]
    assert len(done) == record.figures.completed
    for s in done:
        a = attrs(s)
        assert a[N.GEN_AI_INPUT_TOKENS] > 0 and a[N.POLICY] == "wavepp" and a[N.OUTCOME] == "completed"
        assert a[N.COMPUTED_TOKENS] + a[N.REUSED_TOKENS] == a[N.GEN_AI_INPUT_TOKENS]
        assert a[N.REUSED_TOKENS] == a[N.REUSE_BLOCKS] * 64
        assert 0 <= a[N.ADMISSION_ROUND_S] <= a[N.ADMISSION_LATENCY] <= (s.end_time_unix_nano
                                                                         - s.start_time_unix_nano) / 1e9
        assert a[N.ADMISSION_DEFERRALS] >= 0
        assert [e.name for e in s.events].count(N.EVENT_ADMITTED) >= 1


@pytest.mark.parametrize("ratio", [0.0, 0.5])
def test_parent_based_ratio_sampling_thins_export_only(receiver: OtlpReceiver, ratio: float) -> None:
    full = small_run(TelemetryConfig(mode="otlp", otlp_endpoint="http://127.0.0.1:9"), requests=16)
    record = small_run(TelemetryConfig(mode="otlp", otlp_endpoint=receiver.endpoint, ratio=ratio), requests=16)
    got = {s.span_id: s for _, s in receiver.spans()}
    assert record.meta["spans"] == full.meta["spans"]                # every span recorded either way
    assert record.figures.completed == full.figures.completed == 16
    assert record.figures.input_tokens_per_s == full.figures.input_tokens_per_s
    if ratio == 0.0:
        assert not got
        return
    assert 0 < len(got) < record.meta["spans"]
    for s in got.values():                       # parent-based: a sampled child's parent was sampled too
        if s.parent_span_id:
            assert s.parent_span_id in got


class _GrpcTraceService(trace_service_pb2_grpc.TraceServiceServicer):
    def __init__(self) -> None:
        self.spans: list[Any] = []

    def Export(self, request: Any, context: Any) -> Any:    # noqa: N802 (the proto's name)
        self.spans += [s for rs in request.resource_spans for ss in rs.scope_spans for s in ss.spans]
        return trace_service_pb2.ExportTraceServiceResponse()


def test_grpc_exporter_reaches_a_grpc_collector() -> None:
    service = _GrpcTraceService()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(service, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        record = small_run(TelemetryConfig(mode="otlp", protocol="grpc", otlp_endpoint=f"http://127.0.0.1:{port}"),
                           requests=8)
    finally:
        server.stop(0)
    assert len(service.spans) == record.meta["spans"] > 0
    assert {s.name for s in service.spans} >= {N.REQUEST, N.EXECUTE, N.WAVE_PLAN}


def test_an_unreachable_endpoint_neither_stops_nor_slows_a_run(caplog: pytest.LogCaptureFixture) -> None:
    """Real time (the sim on the wall clock): the run with a dead collector takes about as long as
    one without export; one log line; every exported span counted as dropped."""
    t = time.perf_counter()
    off = small_run(TelemetryConfig(mode="off"), requests=24, realtime=True)
    t_off = time.perf_counter() - t
    with caplog.at_level(logging.WARNING):
        t = time.perf_counter()
        dead = small_run(TelemetryConfig(mode="otlp", otlp_endpoint="http://127.0.0.1:9"), requests=24, realtime=True)
        t_dead = time.perf_counter() - t
    assert dead.figures.completed == off.figures.completed == 24
    assert dead.meta["spans_dropped"]["otlp"] == dead.meta["spans"] > 0
    lines = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(lines) == 1 and "OTLP http/protobuf http://127.0.0.1:9/v1/traces" in lines[0].getMessage()
    # The export thread never blocks the loop; shutdown gives a retrying exporter at most ~1 s.
    assert t_dead < t_off + 2.0, (t_dead, t_off)
