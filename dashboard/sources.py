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
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import redis

from wavepp.dashboard.span_window import SpanWindow
from wavepp.runtime.control.knobs import validated_values
from wavepp.runtime.runs.runfile import SavedRun, load_runs
from wavepp.store.base import KnobsRecord, StoreError
from wavepp.store.records import StatusSnapshot
from wavepp.store.redis_records import decode_status
from wavepp.store.urls import StoreUrl, parse_store_url
from wavepp.telemetry.redis_stream import SpanStreamReader, read_run_labels

LIVE_SPANS_KEPT = 250_000     # per run
LIVE_STATUS_KEPT = 5_000      # per run
LIVE_RUNS_KEPT = 8            # a live store source keeps the most recent runs


@dataclass(slots=True)
class Snapshot:
    run_id: str                                            # the run shown ("" before any run)
    label: str
    spans: Sequence[dict[str, Any]]                       # a live source's decode as they are read
    num_stages: int = 0
    capacities: list[int] = field(default_factory=list)
    knobs: KnobsRecord | None = None
    knob_history: list[dict[str, Any]] = field(default_factory=list)
    status: list[StatusSnapshot] = field(default_factory=list)    # this run's status records only
    live: bool = False
    error: str | None = None
    runs: dict[str, str] = field(default_factory=dict)    # id -> label of the runs available, oldest first
    position: tuple[Any, ...] = ()                        # changes whenever anything a page draws changes
    received: int = 0       # spans of this run ever received: grows by the spans appended, unless some were dropped


class Source(Protocol):
    kind: str
    live: bool

    def snapshot(self, run_id: str | None = None) -> Snapshot:
        """The run ``run_id``; for None (or an id no longer held) a live source's newest run, a
        saved file's first."""
        ...

    def write_knobs(self, changes: dict[str, Any]) -> KnobsRecord:
        """Validated write; raises KnobError (nothing written) or StoreError."""
        ...

    def runs(self) -> list[SavedRun]:
        """Saved runs this source can offer to the Compare page."""
        ...

    def autopilot(self) -> dict[str, Any] | None:
        """The autopilot's record (runtime.autopilot.settings) in the source's store; None: no store."""
        ...

    def write_autopilot(self, changes: dict[str, Any]) -> dict[str, Any]:
        """``changes`` over the autopilot's record, checked; raises SettingsError (nothing written) or StoreError."""
        ...

    def run_meta(self, snap: Snapshot) -> dict[str, Any]:
        """What a what-if replay needs to know of the run shown (:func:`runtime.whatif.preview.sim_spec`):
        engine, model, hardware, pp, block size, capacities, concurrency, workload - what the source knows."""
        ...


def stages_from(spans: Sequence[dict[str, Any]], status: Sequence[StatusSnapshot]) -> tuple[int, list[int]]:
    if status and status[-1].stages:
        caps = [s.capacity for s in status[-1].stages]
        return len(caps), caps
    stages = {int(s["a"].get("wavepp.stage", 0)) for s in spans if "wavepp.stage" in s["a"]}
    return (max(stages) + 1 if stages else 0), []


def _position(run_id: str, received: int, status: Sequence[StatusSnapshot], knobs: KnobsRecord | None,
              history: Sequence[dict[str, Any]]) -> tuple[Any, ...]:
    return (run_id, received, status[-1].t if status else None, len(status),
            knobs.version if knobs else None, len(history))


class RunFileSource:
    """A file written by ``wavepp bench --save-run`` (read-only)."""

    kind = "run"
    live = False

    def __init__(self, path: str) -> None:
        self.path = path
        self._runs = load_runs(path)

    def runs(self) -> list[SavedRun]:
        return self._runs

    def snapshot(self, run_id: str | None = None) -> Snapshot:
        run = next((r for r in self._runs if r.id == run_id), self._runs[0]) if self._runs else None
        if run is None:
            return Snapshot("", "(empty)", [])
        pp = int(run.meta.get("pp", 0)) or stages_from(run.spans, run.status)[0]
        caps = list(run.meta.get("capacities", [])) or stages_from(run.spans, run.status)[1]
        history = [{"version": i + 1, "time": c["t"] / 1e9, "changes": c["changes"]}
                   for i, c in enumerate(run.knob_changes)]
        return Snapshot(run.id, run.label, run.spans, pp, caps, None, history, run.status, False, None,
                        {r.id: r.label for r in self._runs}, (run.id,), len(run.spans))

    def write_knobs(self, changes: dict[str, Any]) -> KnobsRecord:
        raise StoreError("a saved run is read-only: start the dashboard on a live store to change knobs")

    def autopilot(self) -> dict[str, Any] | None:
        return None

    def write_autopilot(self, changes: dict[str, Any]) -> dict[str, Any]:
        raise StoreError("a saved run is read-only: start the dashboard on a live store to steer its autopilot")

    def run_meta(self, snap: Snapshot) -> dict[str, Any]:
        run = next((r for r in self._runs if r.id == snap.run_id), None)
        if run is None:
            return {}
        meta = dict(run.meta)
        meta["knob_changes"] = run.knob_changes
        return meta


class _RunLog:
    """What a live source holds of one run: its latest spans and status records."""

    def __init__(self) -> None:
        self.spans = SpanWindow(LIVE_SPANS_KEPT)
        self.status: deque[StatusSnapshot] = deque(maxlen=LIVE_STATUS_KEPT)
        self.received = 0                                  # spans ever received: the stream position
        self.num_stages = 0                                # stages the spans named (1 + the highest stage)

    def add_spans(self, spans: Sequence[dict[str, Any]]) -> None:
        self.spans.extend(spans)
        self.received += len(spans)
        named = stages_from(spans, ())[0]                  # the new spans only, not the whole window
        self.num_stages = max(self.num_stages, named)

    def add_status(self, status: StatusSnapshot) -> None:
        if not self.status or self.status[-1].t != status.t:
            self.status.append(status)


class StoreSource:
    """A live deployment sharing a Redis store (``wavepp bench --store redis://… --realtime``).

    Spans and status records are kept per run id (the stream and the status key hold every run on
    this cluster), the most recent ``LIVE_RUNS_KEPT`` runs at most; each run's description (what
    Preview replays it in) is read from the store once."""

    kind = "store"
    live = True

    def __init__(self, url: str) -> None:
        self.url: StoreUrl = parse_store_url(url)
        if self.url.kind != "redis":
            raise StoreError("the dashboard reads a live deployment from Redis: give --store redis://…")
        self.client = redis.Redis.from_url(self.url.url, socket_connect_timeout=1.0, socket_timeout=2.0)
        self.prefix = f"wavepp:{{{self.url.cluster}}}"
        self._runs: dict[str, _RunLog] = {}                # insertion order = order of first appearance
        self._labels: dict[str, str] = {}
        self._described: dict[str, dict[str, Any]] = {}   # run id -> its description (runs held only)
        self._stream = SpanStreamReader(self.client, self.url)
        self._lock = threading.Lock()

    @property
    def spans_skipped(self) -> int:
        """Entries of the span stream that were not spans (another client's), skipped so far."""
        return self._stream.skipped

    def runs(self) -> list[SavedRun]:
        return []

    def _log(self, run_id: str) -> _RunLog:
        if run_id not in self._runs:
            self._runs[run_id] = _RunLog()
            while len(self._runs) > LIVE_RUNS_KEPT:
                del self._runs[next(iter(self._runs))]
        return self._runs[run_id]

    def _poll(self) -> None:
        while True:
            before = self._stream.after
            spans = self._stream.read()
            by_run: dict[str, list[dict[str, Any]]] = {}
            for s in spans:
                by_run.setdefault(s.get("run", ""), []).append(s)
            for run_id, mine in by_run.items():
                self._log(run_id).add_spans(mine)
            if self._stream.after == before:     # caught up (a batch of foreign entries alone is not the end)
                break
        status = decode_status(self.client.get(f"{self.prefix}:status"))
        if status is not None:
            self._log(status.run).add_status(status)
        if any(r not in self._labels for r in self._runs):
            self._labels |= read_run_labels(self.client, self.url)

    def _knobs(self) -> tuple[KnobsRecord, list[dict[str, Any]]]:
        from wavepp.store.redis_knobs import read_knobs
        return read_knobs(self.client, self.prefix, 200)

    def snapshot(self, run_id: str | None = None) -> Snapshot:
        error = None
        knobs: KnobsRecord | None = None
        history: list[dict[str, Any]] = []
        with self._lock:
            try:
                self._poll()
                knobs, history = self._knobs()
            except redis.RedisError as exc:
                error = f"store unreachable at {self.url.where}: {exc} — showing the last data received"
            runs = {r: self._labels.get(r) or (f"run {r}" if r else "spans without a run id")
                    for r, log in self._runs.items() if log.spans}
            chosen = run_id if run_id in runs else (next(reversed(runs)) if runs else "")
            log = self._runs.get(chosen, _RunLog())
            spans, status, received = log.spans.spans(), list(log.status), log.received
        stages, caps = stages_from([], status) if status and status[-1].stages else (log.num_stages, [])
        return Snapshot(chosen, runs.get(chosen, "(no run yet)"), spans, stages, caps, knobs, history, status,
                        True, error, runs, _position(chosen, received, status, knobs, history), received)

    def run_meta(self, snap: Snapshot) -> dict[str, Any]:
        """The description the runtime published when the run started (``Store.run_meta_put``: a saved
        run's meta). A store written by an older runtime holds none: then only the stages the status
        records show, and no engine (Preview says why)."""
        from wavepp.store.redis_records import read_run_meta
        with self._lock:
            meta = self._described.get(snap.run_id)
            if meta is None and snap.run_id:
                try:
                    meta = read_run_meta(self.client, self.prefix, snap.run_id)
                except redis.RedisError:
                    meta = None                  # unreachable: the snapshot's banner says so
                if meta is not None:             # a run's description never changes: read it once
                    self._described = {r: m for r, m in self._described.items() if r in self._runs}
                    self._described[snap.run_id] = meta
        if meta is not None:
            return dict(meta)
        return {"pp": snap.num_stages, "capacities": snap.capacities,
                "block_size": snap.knobs.deployment.block_size if snap.knobs and snap.knobs.deployment else 64}

    def write_knobs(self, changes: dict[str, Any]) -> KnobsRecord:
        from wavepp.store.redis_store import RedisStore

        async def write() -> KnobsRecord:
            store = await RedisStore.connect(self.url)
            try:
                return await store.knobs_set(changes, validate=validated_values)
            finally:
                await store.close()
        return asyncio.run(write())

    def autopilot(self) -> dict[str, Any] | None:
        from wavepp.store.redis_records import decode_autopilot
        try:
            return decode_autopilot(self.client.get(f"{self.prefix}:autopilot"))
        except redis.RedisError:
            return None                      # unreachable: the snapshot's banner says so

    def write_autopilot(self, changes: dict[str, Any]) -> dict[str, Any]:
        from wavepp.runtime.autopilot.settings import changed
        settings = changed(self.autopilot(), changes)
        try:
            self.client.set(f"{self.prefix}:autopilot", json.dumps(settings.as_dict(), separators=(",", ":")))
        except redis.RedisError as exc:
            raise StoreError(f"store unreachable at {self.url.where}: {exc}") from None
        return settings.as_dict()


class EmbeddedSource:
    """The runtime started by ``wavepp dashboard`` (no store): spans, knobs and status over a local socket."""

    kind = "embedded"
    live = True

    def __init__(self, runtime: Any) -> None:
        self.runtime = runtime               # dashboard.embedded.RemoteRuntime
        self._spans = SpanWindow(LIVE_SPANS_KEPT)
        self._stages = 0                     # stages the spans named (1 + the highest stage)
        self._after = 0
        self._status: list[StatusSnapshot] = []          # the last status records read (kept when it stops answering)
        self._lock = threading.Lock()
        self.stopped = False                 # the runtime finished or crashed, or its process died

    def restart(self) -> None:
        """Start the stopped runtime again (the dashboard's Restart button); its spans start afresh."""
        with self._lock:
            self.runtime.restart()
            self._spans.clear()
            self._stages = 0
            self._status = []
            self._after = 0
            self.stopped = False

    def runs(self) -> list[SavedRun]:
        return []

    def snapshot(self, run_id: str | None = None) -> Snapshot:
        rt = self.runtime
        error = None
        knobs: KnobsRecord | None = None
        history: list[dict[str, Any]] = []
        with self._lock:
            try:
                spans, self._after = rt.read(self._after)
                self._spans.extend(spans)
                self._stages = max(self._stages, stages_from(spans, ())[0])
                knobs, history, self._status = rt.knobs(), rt.knob_history(), rt.status()
                error = rt.error
                self.stopped = error is not None
            except Exception as exc:          # its process died, or a call failed there: a banner
                error = f"the embedded runtime is not answering: {type(exc).__name__}: {exc}"
                self.stopped = True
            mine, status, named = self._spans.spans(), list(self._status), self._stages
        stages, caps = stages_from((), status) if status and status[-1].stages else (named, [])
        return Snapshot(rt.run_id, rt.label, mine, stages, caps, knobs, history, status, True, error,
                        {rt.run_id: rt.label}, _position(rt.run_id, self._after, status, knobs, history), self._after)

    def write_knobs(self, changes: dict[str, Any]) -> KnobsRecord:
        record: KnobsRecord = self.runtime.set_knobs(changes)
        return record

    def autopilot(self) -> dict[str, Any] | None:
        try:
            record: dict[str, Any] | None = self.runtime.autopilot()
        except Exception:                    # noqa: BLE001 - a runtime not answering: its banner says so
            return None
        return record

    def write_autopilot(self, changes: dict[str, Any]) -> dict[str, Any]:
        record: dict[str, Any] = self.runtime.set_autopilot(changes)
        return record

    def run_meta(self, snap: Snapshot) -> dict[str, Any]:
        """The description the runtime published when its run started (``runtime.runs.meta``, as a
        bench or a server publishes it to its store); empty while it has not (the preview says so)."""
        try:
            meta = self.runtime.run_meta()
        except Exception:                    # noqa: BLE001 - a runtime not answering: nothing to replay
            meta = None
        return dict(meta or {})
