"""Chrome trace-event JSON (Perfetto, chrome://tracing) from finished spans.

One process per run, one lane (tid) per stage for materialize / execute / send, and two more
lanes for admission and wave planning. Timestamps are microseconds on the run's clock.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from telemetry import names as N

_STAGE_SPANS = {N.MATERIALIZE, N.EXECUTE, N.SEND, N.STAGE_WAIT}
_ADMISSION_SPANS = {N.ADMISSION_ROUND, N.HINT_LOOKUP, N.LEASE, N.ESCROW}


Span = dict[str, Any]       # compact form (telemetry.span_codec)


def _lane(span: Span, num_stages: int) -> int | None:
    if span["n"] in _STAGE_SPANS:
        return int(span["a"].get(N.STAGE, 0))
    if span["n"] in _ADMISSION_SPANS:
        return num_stages
    if span["n"] == N.WAVE_PLAN:
        return num_stages + 1
    return None


def trace_events(spans: Sequence[Span], num_stages: int, pid: int, process_name: str,
                 origin_ns: int) -> list[dict[str, Any]]:
    def meta(name: str, args: dict[str, Any], tid: int = 0) -> dict[str, Any]:
        return {"ph": "M", "pid": pid, "tid": tid, "name": name, "args": args}

    events = [meta("process_name", {"name": process_name})]
    lanes = [f"stage {s}" for s in range(num_stages)] + ["admission", "wave plan"]
    for lane, name in enumerate(lanes):
        events += [meta("thread_name", {"name": name}, lane), meta("thread_sort_index", {"sort_index": lane}, lane)]
    for span in spans:
        tid = _lane(span, num_stages)
        if tid is None or span["t0"] is None or span["t1"] is None:
            continue
        events.append({
            "ph": "X", "pid": pid, "tid": tid, "name": span["n"].removeprefix("wavepp."),
            "ts": (span["t0"] - origin_ns) / 1e3, "dur": (span["t1"] - span["t0"]) / 1e3,
            "args": {k.removeprefix("wavepp."): v for k, v in span["a"].items()},
        })
    return events


def write_trace(path: str | Path, runs: Iterable[tuple[str, Sequence[Span], int]]) -> None:
    """Write one trace file; ``runs`` yields (process name, spans in compact form, number of stages)."""
    events: list[dict[str, Any]] = []
    for pid, (name, spans, num_stages) in enumerate(runs, start=1):
        origin = min((s["t0"] for s in spans if s["t0"] is not None), default=0)
        events += trace_events(spans, num_stages, pid, name, origin)
    Path(path).write_text(json.dumps({"traceEvents": events, "displayTimeUnit": "ms"}))
