"""Chrome trace-event JSON (Perfetto, chrome://tracing) from finished spans.

One process per run; per stage three tracks, so no two complete events on a track overlap:
``compute`` (execute), ``send`` (activations to the next stage) and ``prepare`` (materialize,
capacity waits, completion); then ``admission`` (rounds with their lookup / lease / escrow nested
inside) and ``wave plan``. Should two spans of one kind still overlap (a stage preparing two waves),
the later one goes to an overflow track (``stage 0 prepare #2``): on every track, events either
follow one another or nest completely. Flow arrows follow each chunk of a request: from the plan of
its wave through the compute step of every stage. Timestamps are microseconds from the run's
first span, on the run's clock.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from wavepp.telemetry import names as N

Span = dict[str, Any]       # compact form (telemetry.span_codec)
Event = dict[str, Any]

_STAGE_TRACK = {N.EXECUTE: "compute", N.SEND: "send", N.MATERIALIZE: "prepare", N.STAGE_WAIT: "prepare",
                N.COMPLETE: "prepare"}
_ADMISSION_SPANS = {N.ADMISSION_ROUND, N.HINT_LOOKUP, N.LEASE, N.ESCROW}
_STAGE_KINDS = ("compute", "send", "prepare")


def _track(span: Span) -> tuple[int, str] | None:
    """(sort key, track name) of a span, or None for spans not drawn (requests)."""
    name = span["n"]
    if name in _STAGE_TRACK:
        stage = int(span["a"].get(N.STAGE, 0))
        kind = _STAGE_TRACK[name]
        return stage * len(_STAGE_KINDS) + _STAGE_KINDS.index(kind), f"stage {stage} {kind}"
    if name in _ADMISSION_SPANS:
        return 1_000_000, "admission"
    if name == N.WAVE_PLAN:
        return 1_000_001, "wave plan"
    return None


class _Lanes:
    """Sub-tracks of one track: a span goes on the first whose open spans it follows or nests inside."""

    def __init__(self) -> None:
        self.stacks: list[list[int]] = []     # per sub-track: end times of the enclosing open spans

    def place(self, t0: int, t1: int) -> int:
        for i, stack in enumerate(self.stacks):
            while stack and stack[-1] <= t0:
                stack.pop()
            if not stack or stack[-1] >= t1:
                stack.append(t1)
                return i
        self.stacks.append([t1])
        return len(self.stacks) - 1


def trace_events(spans: Sequence[Span], num_stages: int, pid: int, process_name: str,
                 origin_ns: int) -> list[Event]:
    """The events of one run: metadata (names, order), complete events, flow events."""
    drawn = sorted((s for s in spans if s["t0"] is not None and s["t1"] is not None and _track(s) is not None),
                   key=lambda s: (s["t0"], -s["t1"]))
    lanes: dict[str, _Lanes] = {}
    tids: dict[tuple[str, int], int] = {}
    order: dict[int, tuple[int, int]] = {}
    events: list[Event] = []
    placed: dict[int, tuple[int, float]] = {}           # id(span) -> (tid, flow-binding timestamp in us)

    def us(t: int) -> float:
        return (t - origin_ns) / 1e3

    for s in drawn:
        key, track = _track(s)                           # type: ignore[misc]
        sub = lanes.setdefault(track, _Lanes()).place(s["t0"], s["t1"])
        tid = tids.setdefault((track, sub), len(tids) + 1)
        order[tid] = (key, sub)
        events.append({"ph": "X", "pid": pid, "tid": tid, "name": s["n"].removeprefix("wavepp."),
                       "ts": us(s["t0"]), "dur": (s["t1"] - s["t0"]) / 1e3,
                       "args": {k.removeprefix("wavepp."): v for k, v in s["a"].items()}})
        placed[id(s)] = (tid, us((s["t0"] + s["t1"]) // 2))
    meta: list[Event] = [{"ph": "M", "pid": pid, "tid": 0, "name": "process_name", "args": {"name": process_name}},
                         {"ph": "M", "pid": pid, "tid": 0, "name": "process_sort_index", "args": {"sort_index": pid}}]
    for rank, ((track, sub), tid) in enumerate(sorted(tids.items(), key=lambda kv: order[kv[1]])):
        name = track if sub == 0 else f"{track} #{sub + 1}"
        meta += [{"ph": "M", "pid": pid, "tid": tid, "name": "thread_name", "args": {"name": name}},
                 {"ph": "M", "pid": pid, "tid": tid, "name": "thread_sort_index", "args": {"sort_index": rank}}]
    return meta + events + _flows(drawn, placed, num_stages, pid)


def _flows(drawn: Sequence[Span], placed: dict[int, tuple[int, float]], num_stages: int, pid: int) -> list[Event]:
    """One arrow per chunk: its wave's plan -> compute on stage 0 -> ... -> compute on the last stage."""
    computes: dict[tuple[int, int], Span] = {}
    for s in drawn:
        if s["n"] == N.EXECUTE:
            computes.setdefault((int(s["a"].get(N.STAGE, 0)), int(s["a"].get(N.WAVE_ID, -1))), s)
    out: list[Event] = []
    flow_id = pid * 10_000_000           # flow ids are global to the file: each run's have their own range
    for plan in (s for s in drawn if s["n"] == N.WAVE_PLAN and N.WAVE_ID in s["a"]):
        wave = int(plan["a"][N.WAVE_ID])
        steps = [plan] + [computes[(st, wave)] for st in range(num_stages) if (st, wave) in computes]
        if len(steps) < 2:
            continue
        for rid in dict.fromkeys(plan["a"].get(N.REQUEST_IDS, [])):
            flow_id += 1
            for i, step in enumerate(steps):
                tid, ts = placed[id(step)]
                ph = "s" if i == 0 else "f" if i == len(steps) - 1 else "t"
                ev: Event = {"ph": ph, "pid": pid, "tid": tid, "ts": ts, "id": flow_id, "cat": "chunk",
                             "name": f"{rid} wave {wave}"}
                if ph == "f":
                    ev["bp"] = "e"
                out.append(ev)
    return out


def write_trace(path: str | Path, runs: Iterable[tuple[str, Sequence[Span], int]]) -> None:
    """Write one trace file; ``runs`` yields (process name, spans in compact form, number of stages)."""
    events: list[Event] = []
    for pid, (name, spans, num_stages) in enumerate(runs, start=1):
        origin = min((s["t0"] for s in spans if s["t0"] is not None), default=0)
        events += trace_events(spans, num_stages, pid, name, origin)
    Path(path).write_text(json.dumps({"traceEvents": events, "displayTimeUnit": "ms"}))
