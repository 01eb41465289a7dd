"""Saved runs: spans, figures, knob history and status snapshots of every run in one file.

Written by ``wavepp bench --save-run FILE`` (gzip when FILE ends in ``.gz``) and read by the
dashboard (``wavepp dashboard --run FILE``) and its Compare page.
"""

from __future__ import annotations

import gzip
import json
import secrets
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from wavepp.store.records import StatusSnapshot

FORMAT = "wavepp-run/1"


@dataclass(frozen=True, slots=True)
class RunInfo:
    """Who a run is: a unique id (on every span and status record, so runs sharing a store, a
    file or a dashboard never merge) and what a person reads to tell runs apart."""

    id: str
    policy: str
    workload: str
    concurrency: int
    engine: str
    source: str             # where it ran: the store (StoreUrl.shown: no password) or "embedded"
    started: float          # wall-clock start, epoch seconds (also for virtual-time runs)

    @classmethod
    def new(cls, policy: str, workload: str, concurrency: int, engine: str, source: str) -> RunInfo:
        started = time.time()
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(started))
        return cls(f"{stamp}-{secrets.token_hex(3)}", policy, workload, concurrency, engine, source, started)

    @property
    def label(self) -> str:
        at = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(self.started))
        return f"{self.policy} {self.workload} {load_label(self.concurrency)} · {self.engine} · {self.source} · {at}Z"

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def load_label(concurrency: int) -> str:
    """A run's load in words: ``c=N``, or ``open loop`` for 0 - no client-side cap (a server, an open
    loop at a rate, a trace's own arrivals): requests come as they arrive, whatever is outstanding."""
    return f"c={concurrency}" if concurrency > 0 else "open loop"


@dataclass(slots=True)
class SavedRun:
    label: str
    meta: dict[str, Any]               # policy, engine, model, hardware, pp, concurrency, workload, run (RunInfo)
    figures: dict[str, Any]
    spans: list[dict[str, Any]]        # compact form (telemetry.span_codec)
    knob_changes: list[dict[str, Any]] = field(default_factory=list)   # {"t": ns, "changes": {...}}
    status: list[StatusSnapshot] = field(default_factory=list)         # runtime status snapshots
    id: str = ""                       # the run's unique id (RunInfo.id)

    def as_dict(self) -> dict[str, Any]:
        return {"id": self.id, "label": self.label, "meta": self.meta, "figures": self.figures, "spans": self.spans,
                "knob_changes": self.knob_changes, "status": [s.to_json() for s in self.status]}


def save_runs(path: str | Path, runs: Sequence[SavedRun]) -> None:
    data = json.dumps({"format": FORMAT, "runs": [r.as_dict() for r in runs]}, separators=(",", ":"))
    p = Path(path)
    if p.suffix == ".gz":
        p.write_bytes(gzip.compress(data.encode()))
    else:
        p.write_text(data)


def _statuses(raw: Any) -> list[StatusSnapshot]:
    """A saved run's status snapshots; an entry that is not a status record (the file was edited, or
    written by something else) is left out, as the store leaves such a record out."""
    found = (StatusSnapshot.from_json(s) for s in raw) if isinstance(raw, list) else ()
    return [s for s in found if s is not None]


def load_runs(path: str | Path) -> list[SavedRun]:
    """Read a saved-run file; ValueError (one line) when it is missing or not one."""
    p = Path(path)
    try:
        raw = p.read_bytes()
        text = gzip.decompress(raw).decode() if raw[:2] == b"\x1f\x8b" else raw.decode()
        data = json.loads(text)
    except FileNotFoundError:
        raise ValueError(f"no such run file: {p}") from None
    except (OSError, EOFError, ValueError, UnicodeDecodeError) as exc:   # EOFError: a truncated gzip file
        raise ValueError(f"{p} is not a saved run: {type(exc).__name__}: {exc}") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ValueError(f"{p} is not a saved run (expected format {FORMAT})")
    if not isinstance(data.get("runs"), list):
        raise ValueError(f"{p} is not a saved run: 'runs' is not a list")
    for i, r in enumerate(data["runs"]):
        problem = run_problem(r)
        if problem is not None:
            raise ValueError(f"{p}: run {i}: {problem}")
    # Files from before run ids: the position in the file stands in for the id.
    return [SavedRun(r["label"], r["meta"], r["figures"], r["spans"], r.get("knob_changes", []),
                     _statuses(r.get("status", [])), r.get("id") or f"{p.name}#{i}")
            for i, r in enumerate(data["runs"])]


# meta fields the readers compute with, and the least each may be
_META_INTS = {"pp": 1, "concurrency": 0, "block_size": 1}


def run_problem(run: Any) -> str | None:
    """What makes one entry of a run file unusable (its field named), or None: the readers of a
    saved run (figures, replays, the dashboard) then never meet a value of the wrong kind."""
    if not isinstance(run, dict):
        return "not an object"
    for key, kind in (("label", str), ("meta", dict), ("figures", dict), ("spans", list)):
        if not isinstance(run.get(key), kind):
            return f"{key!r} is missing or not a {kind.__name__}"
    for key, least in _META_INTS.items():
        value = run["meta"].get(key, least)
        if not _is_int(value) or value < least:
            return f"meta.{key} must be an integer >= {least}, got {value!r}"
    for j, span in enumerate(run["spans"]):
        problem = span_problem(span)
        if problem is not None:
            return f"span {j}: {problem}"
    changes = run.get("knob_changes", [])
    if not isinstance(changes, list) or not all(
            isinstance(c, dict) and _is_int(c.get("t")) and isinstance(c.get("changes"), dict) for c in changes):
        return "knob_changes must be a list of {\"t\": ns, \"changes\": {...}}"
    return None


def span_problem(span: Any) -> str | None:
    """What is wrong with one span in compact form (``telemetry.span_codec``), or None."""
    if not isinstance(span, dict):
        return "not an object"
    if not isinstance(span.get("n"), str):
        return "'n' (the span's name) is missing or not a string"
    for key in ("t0", "t1"):
        if not _is_int(span.get(key)):
            return f"{key!r} must be a timestamp in integer ns, got {span.get(key)!r}"
    if span["t1"] < span["t0"]:
        return f"ends ({span['t1']}) before it starts ({span['t0']})"
    if not isinstance(span.get("a"), dict):
        return "'a' (its attributes) is missing or not an object"
    return None


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
