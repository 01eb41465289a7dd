"""Saved runs: spans, figures, knob history and status snapshots of every run in one file.

Written by ``wavepp bench --save-run FILE`` (gzip when FILE ends in ``.gz``) and read by the
dashboard (``wavepp dashboard --run FILE``) and its Compare page.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

FORMAT = "wavepp-run/1"


@dataclass(slots=True)
class SavedRun:
    label: str
    meta: dict[str, Any]               # policy, engine, model, hardware, pp, concurrency, workload
    figures: dict[str, Any]
    spans: list[dict[str, Any]]        # compact form (telemetry.span_codec)
    knob_changes: list[dict[str, Any]] = field(default_factory=list)   # {"t": ns, "changes": {...}}
    status: list[dict[str, Any]] = field(default_factory=list)         # runtime status snapshots

    def as_dict(self) -> dict[str, Any]:
        return {"label": self.label, "meta": self.meta, "figures": self.figures, "spans": self.spans,
                "knob_changes": self.knob_changes, "status": self.status}


def save_runs(path: str | Path, runs: Sequence[SavedRun]) -> None:
    data = json.dumps({"format": FORMAT, "runs": [r.as_dict() for r in runs]}, separators=(",", ":"))
    p = Path(path)
    if p.suffix == ".gz":
        p.write_bytes(gzip.compress(data.encode()))
    else:
        p.write_text(data)


def load_runs(path: str | Path) -> list[SavedRun]:
    """Read a saved-run file; ValueError (one line) when it is missing or not one."""
    p = Path(path)
    try:
        raw = p.read_bytes()
        text = gzip.decompress(raw).decode() if raw[:2] == b"\x1f\x8b" else raw.decode()
        data = json.loads(text)
    except FileNotFoundError:
        raise ValueError(f"no such run file: {p}") from None
    except (OSError, ValueError, UnicodeDecodeError) as exc:
        raise ValueError(f"{p} is not a saved run: {exc}") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ValueError(f"{p} is not a saved run (expected format {FORMAT})")
    try:
        return [SavedRun(r["label"], r["meta"], r["figures"], r["spans"], r.get("knob_changes", []),
                         r.get("status", [])) for r in data["runs"]]
    except (KeyError, TypeError) as exc:
        raise ValueError(f"{p} is not a saved run: missing {exc}") from None
