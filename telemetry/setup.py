"""The one place that sets up tracing. Business code calls :meth:`Telemetry.span` and sets attributes.

Spans carry the *runtime's* clock: on the sim engine that is virtual time, mapped onto a fixed
epoch so traces from two runs line up; on real engines it is the event loop's monotonic clock
mapped onto wall time at start. Exporters: an in-memory list (always: the figures are computed
from it), and OTLP when ``OTEL_EXPORTER_OTLP_ENDPOINT`` is set and the exporter is installed.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Link, Span, Status, StatusCode

from telemetry import names as N

log = logging.getLogger(__name__)

# Virtual time 0 is this instant (2026-01-01T00:00:00Z): deterministic timestamps for the sim.
SIM_EPOCH_NS = 1_767_225_600_000_000_000

Attributes = dict[str, Any]
_NOT_RECORDING: AbstractContextManager[Span] = nullcontext(trace.INVALID_SPAN)


class Telemetry:
    """Tracer provider + in-memory exporter bound to one run's clock."""

    def __init__(self, clock: Callable[[], float], epoch_ns: int | None = None,
                 service_name: str = "wavepp", enabled: bool = True, keep: bool = True,
                 run_id: str = "", run_label: str = "") -> None:
        self.enabled = enabled              # False: spans are not recorded (micro-benchmarks of mechanisms)
        # The run's id is a resource attribute: every span of this provider carries it, whichever
        # exporter sees it (memory, the Redis stream, the in-process ring, OTLP).
        self.run_id = run_id
        self._clock = clock
        # Real time (epoch_ns None): map the clock's "now" onto the wall clock's "now" at the
        # first timestamp, which is taken inside the running loop.
        self._epoch_ns = epoch_ns
        resource = {"service.name": service_name} | ({N.RUN_ID: run_id, N.RUN_LABEL: run_label} if run_id else {})
        self.provider = TracerProvider(resource=Resource.create(resource))
        self.memory = InMemorySpanExporter()
        if keep:                             # a long-running live runtime keeps a bounded ring instead
            self.provider.add_span_processor(SimpleSpanProcessor(self.memory))
        self._add_otlp_if_configured()
        self.tracer = self.provider.get_tracer("wavepp")

    def _add_otlp_if_configured(self) -> None:
        if not os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT"):
            return
        try:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        except ImportError:
            log.warning("OTEL_EXPORTER_OTLP_ENDPOINT is set but opentelemetry-exporter-otlp is not installed")
            return
        self.provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))

    def add_span_processor(self, processor: Any) -> None:
        """Attach another exporter pipeline (e.g. a Redis stream) to this run's spans."""
        self.provider.add_span_processor(processor)

    def now_ns(self) -> int:
        t = self._clock()
        if self._epoch_ns is None:
            self._epoch_ns = time.time_ns() - round(t * 1e9)
        return self._epoch_ns + round(t * 1e9)

    @property
    def epoch_ns(self) -> int:
        return self._epoch_ns if self._epoch_ns is not None else 0

    def span(self, name: str, attributes: Attributes | None = None,
             links: Sequence[Link] | None = None) -> AbstractContextManager[Span]:
        """A child of the current span, timed on the runtime clock; exceptions mark it as an error."""
        if not self.enabled:
            return _NOT_RECORDING
        return self._span(name, attributes, links)

    @contextmanager
    def _span(self, name: str, attributes: Attributes | None,
              links: Sequence[Link] | None) -> Iterator[Span]:
        s = self.tracer.start_span(name, attributes=attributes, links=links, start_time=self.now_ns())
        try:
            with trace.use_span(s, end_on_exit=False, record_exception=False, set_status_on_exception=False):
                yield s
        except BaseException as exc:
            s.set_status(Status(StatusCode.ERROR, str(exc)))
            raise
        finally:
            s.end(end_time=self.now_ns())

    def start(self, name: str, attributes: Attributes | None = None, root: bool = False) -> Span:
        """A span ended later by :meth:`end` (request spans outlive any one coroutine)."""
        ctx = trace.set_span_in_context(trace.INVALID_SPAN) if root else None
        return self.tracer.start_span(name, context=ctx, attributes=attributes, start_time=self.now_ns())

    def end(self, span: Span, error: str | None = None) -> None:
        if error is not None:
            span.set_status(Status(StatusCode.ERROR, error))
        span.end(end_time=self.now_ns())

    def event(self, span: Span, name: str, attributes: Attributes | None = None) -> None:
        span.add_event(name, attributes=attributes, timestamp=self.now_ns())

    def finished_spans(self) -> Sequence[ReadableSpan]:
        return self.memory.get_finished_spans()

    def shutdown(self) -> None:
        self.provider.shutdown()
