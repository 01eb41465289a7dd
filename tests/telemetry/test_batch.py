"""The batch processor never blocks the thread that ends spans and counts every span it drops."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from wavepp.telemetry.batch import DropCountingBatchProcessor


class SlowExporter(SpanExporter):
    """Holds every export until released (a collector that stopped answering)."""

    def __init__(self, ok: bool = True) -> None:
        self.release = threading.Event()
        self.exported: list[ReadableSpan] = []
        self.ok = ok

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.release.wait(10)
        self.exported += spans
        return SpanExportResult.SUCCESS if self.ok else SpanExportResult.FAILURE

    def shutdown(self) -> None:
        self.release.set()


def spans(n: int) -> list[ReadableSpan]:
    tracer = TracerProvider().get_tracer("t")
    out = []
    for i in range(n):
        s = tracer.start_span(f"s{i}")
        s.end()
        out.append(s)                      # type: ignore[arg-type]
    return out


def test_a_stuck_exporter_costs_the_caller_nothing_and_drops_are_counted() -> None:
    exporter = SlowExporter()
    p = DropCountingBatchProcessor(exporter, "test", max_queue=100, batch=10, delay_s=0.01)
    batch = spans(1000)
    t = time.perf_counter()
    for s in batch:
        p.on_end(s)
    per_span = (time.perf_counter() - t) / len(batch)
    assert per_span < 50e-6                                   # an append, never a wait on the exporter
    exporter.release.set()
    p.shutdown()
    assert len(exporter.exported) + p.dropped == 1000        # every span either exported or counted
    assert p.dropped >= 1000 - 100 - 10                       # the queue held 100 (+ one batch in flight)
    assert p.exported == len(exporter.exported)


def test_a_failing_exporter_is_logged_once_and_skipped_for_a_while(caplog: pytest.LogCaptureFixture) -> None:
    exporter = SlowExporter(ok=False)
    exporter.release.set()
    p = DropCountingBatchProcessor(exporter, "test", "test endpoint", batch=5, delay_s=0.01, backoff_s=60)
    for s in spans(5):
        p.on_end(s)
    deadline = time.monotonic() + 5
    while p.dropped < 5 and time.monotonic() < deadline:
        time.sleep(0.01)
    for s in spans(20):                    # while the endpoint counts as down: dropped at once
        p.on_end(s)
    p.shutdown()
    assert p.dropped == 25 and p.exported == 0 and len(exporter.exported) == 5
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1 and warnings[0].startswith("test endpoint: dropping spans")


def test_shutdown_flushes_what_is_queued() -> None:
    exporter = SlowExporter()
    exporter.release.set()
    p = DropCountingBatchProcessor(exporter, "test", batch=7, delay_s=5)
    for s in spans(50):
        p.on_end(s)
    p.shutdown()
    assert len(exporter.exported) == 50 and p.dropped == 0
