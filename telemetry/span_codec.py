"""A compact, JSON-friendly form of a finished span: what the Redis span stream carries and what
the dashboard reads, whether the spans come from the stream, a saved run or this process."""

from __future__ import annotations

import json
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import StatusCode


def encode(span: ReadableSpan, run: str = "") -> dict[str, Any]:
    ctx = span.context
    attrs = {k: list(v) if isinstance(v, tuple) else v for k, v in (span.attributes or {}).items()}
    out: dict[str, Any] = {
        "n": span.name, "t0": span.start_time, "t1": span.end_time, "a": attrs,
        "id": f"{ctx.span_id:016x}" if ctx else "", "tr": f"{ctx.trace_id:032x}" if ctx else "",
    }
    if run:
        out["run"] = run
    if span.parent is not None:
        out["p"] = f"{span.parent.span_id:016x}"
    if span.status.status_code == StatusCode.ERROR:
        out["err"] = span.status.description or "error"
    if span.events:
        out["ev"] = [[e.name, e.timestamp, {k: list(v) if isinstance(v, tuple) else v
                                            for k, v in (e.attributes or {}).items()}] for e in span.events]
    if span.links:
        out["ln"] = [f"{link.context.span_id:016x}" for link in span.links]
    return out


def dumps(span: ReadableSpan, run: str = "") -> str:
    return json.dumps(encode(span, run), separators=(",", ":"))
