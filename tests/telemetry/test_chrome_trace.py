"""The Chrome trace opens cleanly in Perfetto: on every track complete events follow one another or
nest completely; compute, send and preparation are separate tracks per stage, all named; flow arrows
follow each chunk from its wave's plan through every stage. Also ``wavepp trace export``."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

from google.protobuf.json_format import ParseDict
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from tests.telemetry.helpers import small_run
from wavepp.runtime.runs.runfile import save_runs
from wavepp.telemetry import names as N
from wavepp.telemetry.chrome_trace import trace_events, write_trace
from wavepp.telemetry.config import TelemetryConfig

WAVEPP = Path(sys.executable).parent / "wavepp"


def no_partial_overlap(events: list[dict[str, Any]]) -> None:
    """As a trace viewer reads it: microsecond timestamps to whole nanoseconds, then on each track
    every event either starts after the open ones end or ends inside the innermost."""
    tracks: dict[tuple[int, int], list[tuple[int, int]]] = defaultdict(list)
    for e in events:
        if e["ph"] == "X":
            t0 = round(e["ts"] * 1e3)
            tracks[(e["pid"], e["tid"])].append((t0, t0 + round(e["dur"] * 1e3)))
    for key, spans in tracks.items():
        stack: list[int] = []
        for t0, t1 in sorted(spans, key=lambda s: (s[0], -s[1])):
            while stack and stack[-1] <= t0:
                stack.pop()
            assert not stack or t1 <= stack[-1], f"track {key}: [{t0}, {t1}] overlaps an event ending {stack[-1]}"
            stack.append(t1)


def test_trace_is_perfetto_clean_with_flows(tmp_path: Path) -> None:
    record = small_run(TelemetryConfig(mode="off"), requests=16)
    path = tmp_path / "t.json"
    write_trace(path, [(record.label, record.encoded, 2)])
    events = json.loads(path.read_text())["traceEvents"]
    no_partial_overlap(events)
    names = {e["tid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    assert {"stage 0 compute", "stage 0 send", "stage 0 prepare", "stage 1 compute", "admission",
            "wave plan"} <= set(names.values())
    assert any(e["name"] == "process_name" and e["args"]["name"] == record.label for e in events)
    by_track: dict[str, set[str]] = defaultdict(set)
    for e in events:
        if e["ph"] == "X":
            by_track[names[e["tid"]].split(" #")[0]].add(e["name"])
    assert by_track["stage 1 compute"] == {"stage.execute"}
    assert by_track["stage 0 send"] == {"stage.send"}
    assert by_track["stage 0 prepare"] <= {"stage.materialize", "stage.wait", "stage.complete"}
    # Flows: one per chunk, plan -> stage 0 compute -> stage 1 compute, forward in time, each step
    # inside a slice of its track.
    flows: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for e in events:
        if e["ph"] in "stf":
            flows[e["id"]].append(e)
    chunks = sum(len(dict.fromkeys(s["a"][N.REQUEST_IDS])) for s in record.encoded
                 if s["n"] == N.WAVE_PLAN and s["a"].get(N.TOKENS, 0) > 0)
    assert len(flows) == chunks > 0
    slices = defaultdict(list)
    for e in events:
        if e["ph"] == "X":
            slices[e["tid"]].append((e["ts"], e["ts"] + e["dur"]))
    for steps in flows.values():
        assert [s["ph"] for s in steps] == ["s", "t", "f"]
        assert [names[s["tid"]] for s in steps] == ["wave plan", "stage 0 compute", "stage 1 compute"]
        assert steps == sorted(steps, key=lambda s: s["ts"]) and steps[-1]["bp"] == "e"
        for s in steps:
            assert any(a <= s["ts"] <= b for a, b in slices[s["tid"]])


def test_overlapping_spans_of_one_kind_get_an_overflow_track() -> None:
    spans = [{"n": N.MATERIALIZE, "t0": 0, "t1": 100, "a": {N.STAGE: 0, N.WAVE_ID: 1}},
             {"n": N.MATERIALIZE, "t0": 50, "t1": 150, "a": {N.STAGE: 0, N.WAVE_ID: 2}},
             {"n": N.ADMISSION_ROUND, "t0": 0, "t1": 100, "a": {}},
             {"n": N.LEASE, "t0": 10, "t1": 20, "a": {}}]
    events = trace_events(spans, 1, 1, "run", 0)
    no_partial_overlap(events)
    names = {e["tid"]: e["args"]["name"] for e in events if e["name"] == "thread_name"}
    assert sorted(names.values()) == ["admission", "stage 0 prepare", "stage 0 prepare #2"]


def test_trace_export_cli(tmp_path: Path) -> None:
    record = small_run(TelemetryConfig(mode="off"), requests=8)
    runfile = tmp_path / "run.json.gz"
    save_runs(runfile, [record.saved()])
    chrome, otlp = tmp_path / "c.json", tmp_path / "o.json"
    for fmt, out in (("chrome", chrome), ("otlp-json", otlp)):
        r = subprocess.run([str(WAVEPP), "trace", "export", str(runfile), "--format", fmt, "--out", str(out)],
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
    no_partial_overlap(json.loads(chrome.read_text())["traceEvents"])
    data = json.loads(otlp.read_text())
    # OTLP/JSON ids are hex (the spec's deviation from proto3 JSON): turn them into bytes' base64 to parse.
    import base64
    for rs in data["resourceSpans"]:
        for ss in rs["scopeSpans"]:
            for s in ss["spans"]:
                for k in ("traceId", "spanId", "parentSpanId"):
                    if k in s:
                        s[k] = base64.b64encode(bytes.fromhex(s[k])).decode()
                for link in s.get("links", []):
                    for k in ("traceId", "spanId"):
                        link[k] = base64.b64encode(bytes.fromhex(link[k])).decode()
    req = ParseDict(data, ExportTraceServiceRequest())
    spans = [s for rs in req.resource_spans for ss in rs.scope_spans for s in ss.spans]
    assert len(spans) == len(record.encoded)
    ids = {s.span_id for s in spans}
    assert all(link.span_id in ids for s in spans for link in s.links)
    assert any(s.links for s in spans if s.name == N.WAVE_PLAN)
    bad = subprocess.run([str(WAVEPP), "trace", "export", str(tmp_path / "nope.json"), "--out", str(chrome)],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and bad.stderr.strip().count("\n") == 0 and "no such run file" in bad.stderr
