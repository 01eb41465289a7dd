"""Where the dashboard's data comes from: a saved run file, a Redis store, or the embedded runtime.

Each source gives a :class:`Snapshot` (spans in compact form, knobs, status snapshots) and, when
it is live, takes knob writes. Live sources read incrementally and keep a bounded window of spans.
A source never raises to the page: a store that cannot be reached is reported in
``Snapshot.error`` (a banner) and the last data stays on screen until it comes back.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Protocol

import redis

from runtime.runfile import SavedRun, load_runs
from store.base import KnobsRecord, StoreError
from store.urls import StoreUrl, parse_store_url
from telemetry.redis_stream import read_spans

LIVE_SPANS_KEPT = 250_000


@dataclass(slots=True)
class Snapshot:
    label: str
    spans: list[dict[str, Any]]
    num_stages: int = 0
    capacities: list[int] = field(default_factory=list)
    knobs: KnobsRecord | None = None
    knob_history: list[dict[str, Any]] = field(default_factory=list)
    status: list[dict[str, Any]] = field(default_factory=list)
    live: bool = False
    error: str | None = None
    labels: list[str] = field(default_factory=list)       # runs available (saved file, or the stream)


class Source(Protocol):
    kind: str
    live: bool

    def snapshot(self, label: str | None = None) -> Snapshot: ...

    def write_knobs(self, changes: dict[str, Any]) -> KnobsRecord:
        """Validated write; raises KnobError (nothing written) or StoreError."""
        ...

    def runs(self) -> list[SavedRun]:
        """Saved runs this source can offer to the Compare page."""
        ...


def stages_from(spans: list[dict[str, Any]], status: list[dict[str, Any]]) -> tuple[int, list[int]]:
    if status and status[-1].get("stages"):
        caps = [int(s["capacity"]) for s in status[-1]["stages"]]
        return len(caps), caps
    stages = {int(s["a"].get("wavepp.stage", 0)) for s in spans if "wavepp.stage" in s["a"]}
    return (max(stages) + 1 if stages else 0), []


class RunFileSource:
    """A file written by ``wavepp bench --save-run`` (read-only)."""

    kind = "run"
    live = False

    def __init__(self, path: str) -> None:
        self.path = path
        self._runs = load_runs(path)

    def runs(self) -> list[SavedRun]:
        return self._runs

    def snapshot(self, label: str | None = None) -> Snapshot:
        run = next((r for r in self._runs if r.label == label), self._runs[0]) if self._runs else None
        if run is None:
            return Snapshot("(empty)", [], labels=[])
        pp = int(run.meta.get("pp", 0)) or stages_from(run.spans, run.status)[0]
        caps = list(run.meta.get("capacities", [])) or stages_from(run.spans, run.status)[1]
        history = [{"version": i + 1, "time": c["t"] / 1e9, "changes": c["changes"]}
                   for i, c in enumerate(run.knob_changes)]
        return Snapshot(run.label, run.spans, pp, caps, None, history, run.status, False, None,
                        [r.label for r in self._runs])

    def write_knobs(self, changes: dict[str, Any]) -> KnobsRecord:
        raise StoreError("a saved run is read-only: start the dashboard on a live store to change knobs")


class StoreSource:
    """A live deployment sharing a Redis store (``wavepp bench --store redis://… --realtime``)."""

    kind = "store"
    live = True

    def __init__(self, url: str) -> None:
        self.url: StoreUrl = parse_store_url(url)
        if self.url.kind != "redis":
            raise StoreError("the dashboard reads a live deployment from Redis: give --store redis://…")
        self.client = redis.Redis.from_url(self.url.url, socket_connect_timeout=1.0, socket_timeout=2.0)
        self.prefix = f"wavepp:{{{self.url.cluster}}}"
        self._spans: deque[dict[str, Any]] = deque(maxlen=LIVE_SPANS_KEPT)
        self._after = "-"
        self._status: deque[dict[str, Any]] = deque(maxlen=5_000)
        self._lock = threading.Lock()

    def runs(self) -> list[SavedRun]:
        return []

    def _poll(self) -> None:
        while True:
            spans, self._after = read_spans(self.client, self.url, self._after)
            self._spans.extend(spans)
            if not spans:
                break
        raw = self.client.get(f"{self.prefix}:status")
        if raw:
            status = json.loads(raw)
            if not self._status or self._status[-1].get("t") != status.get("t"):
                self._status.append(status)

    def _knobs(self) -> tuple[KnobsRecord, list[dict[str, Any]]]:
        from store.redis_store import read_knobs
        return read_knobs(self.client, self.prefix, 200)

    def snapshot(self, label: str | None = None) -> Snapshot:
        error = None
        knobs: KnobsRecord | None = None
        history: list[dict[str, Any]] = []
        with self._lock:
            try:
                self._poll()
                knobs, history = self._knobs()
            except redis.RedisError as exc:
                error = f"store unreachable at {self.url.where}: {exc} — showing the last data received"
            spans = list(self._spans)
            status = list(self._status)
        labels = list(dict.fromkeys(s.get("run", "") for s in spans))
        chosen = label if label in labels else (labels[-1] if labels else "")
        mine = [s for s in spans if s.get("run", "") == chosen]
        stages, caps = stages_from(mine, status)
        return Snapshot(chosen or "(no run yet)", mine, stages, caps, knobs, history, status, True, error, labels)

    def write_knobs(self, changes: dict[str, Any]) -> KnobsRecord:
        from store.redis_store import RedisStore

        async def write() -> KnobsRecord:
            store = await RedisStore.connect(self.url)
            try:
                return await store.knobs_set(changes)
            finally:
                await store.close()
        return asyncio.run(write())


class EmbeddedSource:
    """The runtime started by ``wavepp dashboard`` (no store): spans, knobs and status over a local socket."""

    kind = "embedded"
    live = True

    def __init__(self, runtime: Any) -> None:
        self.runtime = runtime               # dashboard.embedded.RemoteRuntime
        self._spans: deque[dict[str, Any]] = deque(maxlen=LIVE_SPANS_KEPT)
        self._after = 0
        self._lock = threading.Lock()
        self.stopped = False                 # the runtime finished or crashed, or its process died

    def restart(self) -> None:
        """Start the stopped runtime again (the dashboard's Restart button); its spans start afresh."""
        with self._lock:
            self.runtime.restart()
            self._spans.clear()
            self._after = 0
            self.stopped = False

    def runs(self) -> list[SavedRun]:
        return []

    def snapshot(self, label: str | None = None) -> Snapshot:
        rt = self.runtime
        error = None
        knobs: KnobsRecord | None = None
        history: list[dict[str, Any]] = []
        status: list[dict[str, Any]] = []
        with self._lock:
            try:
                spans, self._after = rt.read(self._after)
                self._spans.extend(spans)
                knobs, history, status = rt.knobs(), rt.knob_history(), rt.status()
                error = rt.error
                self.stopped = error is not None
            except Exception as exc:          # its process died, or a call failed there: a banner
                error = f"the embedded runtime is not answering: {type(exc).__name__}: {exc}"
                self.stopped = True
            mine = list(self._spans)
        stages, caps = stages_from(mine, status)
        return Snapshot(rt.label, mine, stages, caps, knobs, history, status, True, error, [rt.label])

    def write_knobs(self, changes: dict[str, Any]) -> KnobsRecord:
        record: KnobsRecord = self.runtime.set_knobs(changes)
        return record
