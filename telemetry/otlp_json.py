"""Saved spans (compact form, ``telemetry.span_codec``) as OTLP/JSON: one ``ExportTraceServiceRequest``
a collector's ``otlpjsonfile`` receiver, ``otel-cli`` or a POST to ``/v1/traces`` takes.

The OTLP/JSON encoding is proto3's JSON mapping of ``opentelemetry.proto.collector.trace.v1`` with
two deviations the specification makes: trace and span ids are hex strings (not base64), and enum
values are integers. 64-bit integers (timestamps, ``intValue``) are decimal strings.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from wavepp.telemetry import names as N

Span = dict[str, Any]
STATUS_ERROR = 2
SPAN_KIND_INTERNAL = 1


def any_value(v: Any) -> dict[str, Any]:
    if isinstance(v, bool):
        return {"boolValue": v}
    if isinstance(v, int):
        return {"intValue": str(v)}
    if isinstance(v, float):
        return {"doubleValue": v}
    if isinstance(v, list | tuple):
        return {"arrayValue": {"values": [any_value(x) for x in v]}}
    return {"stringValue": str(v)}


def key_values(attrs: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"key": k, "value": any_value(v)} for k, v in attrs.items()]


def otlp_span(s: Span, trace_of: dict[str, str]) -> dict[str, Any]:
    out: dict[str, Any] = {
        "traceId": s["tr"], "spanId": s["id"], "name": s["n"], "kind": SPAN_KIND_INTERNAL,
        "startTimeUnixNano": str(s["t0"]), "endTimeUnixNano": str(s["t1"]), "attributes": key_values(s["a"]),
    }
    if s.get("p"):
        out["parentSpanId"] = s["p"]
    if s.get("ev"):
        out["events"] = [{"name": name, "timeUnixNano": str(t), "attributes": key_values(a)}
                         for name, t, a in s["ev"]]
    if s.get("ln"):      # the compact form keeps the linked span's id; its trace is found among the run's spans
        out["links"] = [{"traceId": trace_of[sid], "spanId": sid} for sid in s["ln"] if sid in trace_of]
    out["status"] = {"code": STATUS_ERROR, "message": s["err"]} if "err" in s else {}
    return out


def otlp_request(runs: Sequence[tuple[str, str, Sequence[Span]]], service: str = "wavepp") -> dict[str, Any]:
    """One resource per run (``service.name``, ``wavepp.run.id``, ``wavepp.run.label``)."""
    resource_spans = []
    for run_id, label, spans in runs:
        trace_of = {s["id"]: s["tr"] for s in spans if s.get("id")}
        resource = {"service.name": service, N.RUN_ID: run_id, N.RUN_LABEL: label}
        resource_spans.append({
            "resource": {"attributes": key_values(resource)},
            "scopeSpans": [{"scope": {"name": "wavepp"},
                            "spans": [otlp_span(s, trace_of) for s in spans
                                      if s.get("id") and s["t0"] is not None and s["t1"] is not None]}],
        })
    return {"resourceSpans": resource_spans}


def dumps_otlp_json(runs: Sequence[tuple[str, str, Sequence[Span]]]) -> str:
    return json.dumps(otlp_request(runs), separators=(",", ":"))
