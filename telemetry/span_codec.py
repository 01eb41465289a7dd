"""A compact, JSON-friendly form of a finished span: what the Redis span stream carries and what
the dashboard reads, whether the spans come from the stream, a saved run or this process.

``run`` is the id of the run the span belongs to (the provider's ``wavepp.run.id`` resource
attribute), so several runs in one stream, ring or file never mix. :func:`loads` reads it back and
refuses what is not one: the Redis stream is open to other clients."""

from __future__ import annotations

import json
from typing import Any

import orjson
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import StatusCode

from wavepp.telemetry import names as N


def run_of(span: ReadableSpan) -> tuple[str, str]:
    """(id, label) of the span's run; empty strings for a span recorded outside a run."""
    attrs = span.resource.attributes if span.resource is not None else {}
    return str(attrs.get(N.RUN_ID, "")), str(attrs.get(N.RUN_LABEL, ""))


def encode(span: ReadableSpan) -> dict[str, Any]:
    ctx = span.context
    run = run_of(span)[0]
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


def dumps(span: ReadableSpan) -> str:
    return json.dumps(encode(span), separators=(",", ":"))


# The longest entry :func:`loads` parses. WavePP's spans are under a kilobyte (the largest in a sim
# bench, a request's with its attributes: about 630 bytes); a longer entry was appended by another
# client and is refused unparsed.
MAX_SPAN_BYTES = 1 << 20

# The compact form's fields and their JSON types: the first five are always there (what every
# reader indexes), the rest only when the span has them.
_REQUIRED: dict[str, type] = {"n": str, "t0": int, "t1": int, "a": dict, "id": str}
_OPTIONAL: dict[str, type] = {"tr": str, "run": str, "p": str, "err": str, "ev": list, "ln": list}


def loads(raw: bytes | str) -> dict[str, Any] | None:
    """The compact span :func:`dumps` wrote, or None when ``raw`` is not one: longer than
    :data:`MAX_SPAN_BYTES`, not UTF-8, not JSON, nested past the parser's recursion limit, or an
    object without the fields and types above. Plain JSON only: nothing in it is ever run."""
    if len(raw) > MAX_SPAN_BYTES:
        return None
    try:
        span = orjson.loads(raw)
    except orjson.JSONDecodeError:             # what orjson does not take (NaN, integers past 64 bits): json's verdict
        try:
            span = json.loads(raw)
        except (ValueError, RecursionError):   # JSONDecodeError and UnicodeDecodeError are ValueErrors
            return None
    if not isinstance(span, dict):
        return None
    for name, kind in _REQUIRED.items():
        if not _is(span.get(name), kind):
            return None
    for name, kind in _OPTIONAL.items():
        if name in span and not _is(span[name], kind):
            return None
    return span


def _is(value: Any, kind: type) -> bool:
    return isinstance(value, kind) and not isinstance(value, bool)     # JSON true is no timestamp
