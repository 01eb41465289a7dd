"""A batch span processor that never blocks the runtime's loop and counts what it drops.

``on_end`` (called on the loop's thread) only appends to a bounded queue: when the queue is full
the span is dropped and counted, never waited for. One worker thread exports batches. When an
export fails (a collector or Redis that is unreachable) the processor logs one line, counts the
batch as dropped and, for ``backoff_s``, drops new spans at once instead of queueing them behind
an exporter that is retrying: a dead endpoint neither grows memory nor delays shutdown.

``sampled_only``: export only spans whose trace flags say *sampled* (OTLP, under the configured
sampler); the ring and the Redis stream take every recorded span (the figures need all of them).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque

from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

log = logging.getLogger(__name__)


class DropCountingBatchProcessor(SpanProcessor):
    def __init__(self, exporter: SpanExporter, name: str, where: str = "", *, max_queue: int = 1 << 16,
                 batch: int = 2048, delay_s: float = 0.2, backoff_s: float = 5.0, sampled_only: bool = False,
                 shutdown_timeout_s: float = 5.0, stall_s: float = 1.0) -> None:
        self.exporter = exporter
        self.name = name                     # short: "otlp", "span-stream" (the dropped-spans metric's label)
        self.where = where or name           # for the log line: "OTLP http/protobuf http://…"
        self.sampled_only = sampled_only
        self.exported = 0
        # Spans lost (queue full, endpoint down, export failed): one counter per thread that writes it,
        # so neither side needs a lock.
        self._dropped_on_loop = 0
        self._dropped_on_worker = 0
        self._queue: deque[ReadableSpan] = deque()
        self._max_queue = max_queue
        self._batch = batch
        self._delay_s = delay_s
        self._backoff_s = backoff_s
        self._shutdown_timeout_s = shutdown_timeout_s
        self._stall_s = stall_s              # an export this slow is an exporter retrying a dead endpoint
        self._export_started: float | None = None
        self._down_until = 0.0               # monotonic time until which the endpoint counts as down
        self._logged = False
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stopping = False
        self._worker = threading.Thread(target=self._run, name=f"wavepp-export-{name}", daemon=True)
        self._worker.start()

    # ---- the loop's side: never waits ------------------------------------------------------------
    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        return None

    def on_end(self, span: ReadableSpan) -> None:
        if self.sampled_only and not span.context.trace_flags.sampled:
            return
        if self._stopping or len(self._queue) >= self._max_queue or time.monotonic() < self._down_until:
            self._dropped_on_loop += 1
            return
        self._queue.append(span)         # deque.append is atomic: no lock on the loop's path
        if len(self._queue) >= self._batch:
            self._wake.set()

    @property
    def dropped(self) -> int:
        return self._dropped_on_loop + self._dropped_on_worker

    # ---- the worker's side --------------------------------------------------------------------
    def _take(self) -> list[ReadableSpan]:
        out: list[ReadableSpan] = []
        while self._queue and len(out) < self._batch:
            out.append(self._queue.popleft())
        return out

    def _export(self, spans: list[ReadableSpan]) -> None:
        if time.monotonic() < self._down_until:
            self._dropped_on_worker += len(spans)
            return
        self._export_started = time.monotonic()
        try:
            ok = self.exporter.export(spans) == SpanExportResult.SUCCESS
            error = "the exporter reported a failure"
        except Exception as exc:  # an exporter bug must not kill the worker (and with it every export)
            ok, error = False, f"{type(exc).__name__}: {exc}"
        finally:
            self._export_started = None
        if ok:
            self.exported += len(spans)
            return
        self._dropped_on_worker += len(spans)
        self._down_until = time.monotonic() + self._backoff_s
        if not self._logged:             # once per run: an outage would repeat it every batch
            self._logged = True
            log.warning("%s: dropping spans, export failed (%s); the run goes on, drops are counted",
                        self.where, error)

    def _run(self) -> None:
        while True:
            self._wake.wait(self._delay_s)
            self._wake.clear()
            while self._queue:
                with self._lock:
                    batch = self._take()
                self._export(batch)
            if self._stopping:
                return

    # ---- end of run ---------------------------------------------------------------------------
    def _stuck(self) -> bool:
        """The endpoint is known down, or an export has been retrying for longer than a healthy one takes."""
        now = time.monotonic()
        started = self._export_started
        return now < self._down_until or (started is not None and now - started > self._stall_s)

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Wait until what is queued is exported; give up at the deadline or when the endpoint is stuck."""
        deadline = time.monotonic() + timeout_millis / 1e3
        self._wake.set()
        while (self._queue or self._export_started is not None) and time.monotonic() < deadline and not self._stuck():
            time.sleep(0.005)
        return not self._queue

    def shutdown(self) -> None:
        """Export what is queued within ``shutdown_timeout_s``; what is left then is dropped and counted."""
        if self._stopping:
            return
        self.force_flush(int(self._shutdown_timeout_s * 1e3))
        self._stopping = True
        self._wake.set()
        self.exporter.shutdown()         # cancels an exporter's retry wait (a stuck export returns now)
        self._worker.join(self._shutdown_timeout_s)
        with self._lock:
            left = len(self._queue)
            self._queue.clear()
        self._dropped_on_worker += left
