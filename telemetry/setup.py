"""The one place that sets up tracing and metrics. Business code calls :meth:`Telemetry.span` (or
``start`` / ``end``) and sets attributes; nothing else creates a provider, a processor or an exporter.

Spans carry the *runtime's* clock: on the sim engine that is virtual time, mapped onto a fixed
epoch so traces from two runs line up; on real engines it is the event loop's monotonic clock
mapped onto wall time at start.

Where a run's spans go (``TelemetryConfig``: the ``OTEL_*`` environment and ``--telemetry``):

- the run's figures (``feed``): every recorded span, folded in as it ends (when nothing below reads
  spans, they are :mod:`telemetry.feed_tracer`'s, made for the feed alone);
- the run's own list of the SDK's spans (``keep``: tests, micro-benchmarks; a bench keeps its spans
  through the feed, in compact form);
- metrics (``telemetry.metrics``), when a metrics endpoint is asked for: exact, every span;
- with ``--telemetry on|otlp``: the embedded dashboard's ring, the Redis span stream (Redis store),
  and OTLP over HTTP/protobuf or gRPC (sampled spans only) when an endpoint is configured.

The sampler is parent-based ratio sampling by default (``OTEL_TRACES_SAMPLER[_ARG]``) wrapped so
a span it does not sample is still *recorded*: local consumers see every span, only export thins.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from types import TracebackType
from typing import TYPE_CHECKING, Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace import Span as SdkSpan
from opentelemetry.sdk.trace.sampling import (
    ALWAYS_OFF,
    ALWAYS_ON,
    Decision,
    ParentBased,
    Sampler,
    SamplingResult,
    TraceIdRatioBased,
)
from opentelemetry.trace import Link, Span, SpanKind, Status, StatusCode
from opentelemetry.trace.span import TraceState
from opentelemetry.util.types import Attributes as OtelAttributes

from wavepp.store.records import StatusSnapshot
from wavepp.store.urls import StoreUrl
from wavepp.telemetry import names as N
from wavepp.telemetry.batch import DropCountingBatchProcessor
from wavepp.telemetry.config import TelemetryConfig
from wavepp.telemetry.feed import SpanFeed
from wavepp.telemetry.feed_tracer import FeedTracer
from wavepp.telemetry.metrics import WaveppMetrics, process_metrics, process_metrics_if_any

if TYPE_CHECKING:
    from wavepp.telemetry.redis_stream import RedisSpanExporter

log = logging.getLogger(__name__)

# Virtual time 0 is this instant (2026-01-01T00:00:00Z): deterministic timestamps for the sim.
SIM_EPOCH_NS = 1_767_225_600_000_000_000

Attributes = dict[str, Any]
_NOT_RECORDING: AbstractContextManager[Span] = nullcontext(trace.INVALID_SPAN)

_CONFIG: list[TelemetryConfig] = []


class _SpanScope:
    """:meth:`Telemetry.span`'s ``with`` block: the span starts at entry and is the current span inside; at
    exit it ends, with an error status if an exception leaves the block. A plain class, not a generator
    context manager: the runtime opens one for every lookup, pin, reserve, chunk and step."""

    __slots__ = ("_tel", "_name", "_attributes", "_links", "_parent", "_cpu", "_cpu0", "_span", "_token")

    def __init__(self, tel: Telemetry, name: str, attributes: Attributes | None, links: Sequence[Link] | None,
                 parent: Span | None, cpu: bool) -> None:
        self._tel, self._name, self._attributes, self._links = tel, name, attributes, links
        self._parent, self._cpu, self._cpu0 = parent, cpu, 0

    def __enter__(self) -> Span:
        ctx = trace.set_span_in_context(self._parent) if self._parent is not None else None
        self._span = s = self._tel.tracer.start_span(self._name, context=ctx, attributes=self._attributes,
                                                     links=self._links, start_time=self._tel.now_ns())
        if self._cpu:
            self._cpu0 = time.thread_time_ns()
        self._token = otel_context.attach(trace.set_span_in_context(s))
        return s

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        s = self._span
        otel_context.detach(self._token)
        if exc is not None:
            s.set_status(Status(StatusCode.ERROR, str(exc)))
        if self._cpu:
            s.set_attribute(N.LOOP_CPU_S, (time.thread_time_ns() - self._cpu0) / 1e9)
        s.end(end_time=self._tel.now_ns())


def configure(cfg: TelemetryConfig | None) -> None:
    """Set the process's telemetry settings (the CLI does, once, from the environment and its flags);
    None goes back to the environment alone."""
    _CONFIG[:] = [cfg] if cfg is not None else []


def current_config() -> TelemetryConfig:
    """What :func:`configure` set, else the environment alone."""
    return _CONFIG[0] if _CONFIG else TelemetryConfig.from_env()


class RecordAll(Sampler):
    """``root`` decides what is *sampled* (exported); a span it drops is recorded all the same, with
    the attributes it was started with (the SDK's ``AlwaysRecordSampler`` loses those: a dropped
    result carries none)."""

    def __init__(self, root: Sampler) -> None:
        self.root = root

    def should_sample(self, parent_context: Context | None, trace_id: int, name: str, kind: SpanKind | None = None,
                      attributes: OtelAttributes = None, links: Sequence[Link] | None = None,
                      trace_state: TraceState | None = None) -> SamplingResult:
        result = self.root.should_sample(parent_context, trace_id, name, kind, attributes, links, trace_state)
        if result.decision is Decision.DROP:
            return SamplingResult(Decision.RECORD_ONLY, attributes, result.trace_state)
        return result

    def get_description(self) -> str:
        return f"RecordAll{{{self.root.get_description()}}}"


def make_sampler(cfg: TelemetryConfig) -> Sampler:
    """The configured sampler; what it does not sample is recorded all the same (not exported)."""
    root: Sampler = {"always_on": ALWAYS_ON, "always_off": ALWAYS_OFF, "parentbased_always_on": ParentBased(ALWAYS_ON),
                     "parentbased_always_off": ParentBased(ALWAYS_OFF), "traceidratio": TraceIdRatioBased(cfg.ratio),
                     "parentbased_traceidratio": ParentBased(TraceIdRatioBased(cfg.ratio))}[cfg.sampler]
    return RecordAll(root)


def make_resource(run_id: str = "", run_label: str = "") -> Resource:
    """``OTEL_SERVICE_NAME`` (default ``wavepp``) and ``OTEL_RESOURCE_ATTRIBUTES``, plus the run's id
    and label: every span of the run carries them, whichever exporter sees it."""
    attrs: dict[str, Any] = {"service.name": os.environ.get("OTEL_SERVICE_NAME") or "wavepp"}
    if run_id:
        attrs |= {N.RUN_ID: run_id, N.RUN_LABEL: run_label}
    return Resource.create(attrs)


class SpanList(SpanProcessor):
    """Every recorded span of the run, sampled or not, in end order (the figures' input)."""

    def __init__(self) -> None:
        self.spans: list[ReadableSpan] = []
        self._lock = threading.Lock()

    def on_start(self, span: SdkSpan, parent_context: Context | None = None) -> None:
        return None

    def on_end(self, span: ReadableSpan) -> None:
        with self._lock:
            self.spans.append(span)

    def shutdown(self) -> None:
        return None

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


class Telemetry:
    """One run's tracer provider, its processors and exporters, bound to the run's clock."""

    def __init__(self, clock: Callable[[], float], epoch_ns: int | None = None,
                 enabled: bool = True, keep: bool = True, run_id: str = "", run_label: str = "",
                 policy: str = "", config: TelemetryConfig | None = None, stream: StoreUrl | None = None,
                 ring: SpanProcessor | None = None, metrics: WaveppMetrics | None = None,
                 num_stages: int = 0, feed: SpanProcessor | None = None) -> None:
        """``keep``: hold every span as the SDK made it (:meth:`finished_spans`: tests and
        micro-benchmarks; a bench keeps its compact spans through ``feed``); ``ring``: a live view's
        bounded span ring; ``stream``: the Redis store whose span stream gets the spans; ``metrics``:
        the instruments to feed (default: the process's, once a metrics endpoint is configured or
        anything asked for them); ``feed``: a processor that sees every recorded span as it ends
        (the run's figures, folded in as the spans arrive)."""
        self.enabled = enabled              # False: spans are not recorded (micro-benchmarks of mechanisms)
        self.run_id = run_id
        self.run_label = run_label
        self.policy = policy
        self.config = cfg = config or current_config()
        self._clock = clock
        # Real time (epoch_ns None): map the clock's "now" onto the wall clock's "now" at the
        # first timestamp, which is taken inside the running loop.
        self._epoch_ns = epoch_ns
        self.provider = TracerProvider(resource=make_resource(run_id, run_label), sampler=make_sampler(cfg))
        self._list = SpanList()
        if keep:
            self.provider.add_span_processor(self._list)
        if feed is not None:
            self.provider.add_span_processor(feed)
        if metrics is None:
            metrics = process_metrics() if cfg.metrics_port is not None else process_metrics_if_any()
        self.metrics = metrics
        if metrics is not None:
            self.provider.add_span_processor(metrics.span_processor(policy, num_stages))
        self.exporters: list[DropCountingBatchProcessor] = []
        self._stream: RedisSpanExporter | None = None
        ring_reads = cfg.exports and ring is not None
        if cfg.exports and ring is not None:
            self.provider.add_span_processor(ring)
        if cfg.exports:
            if stream is not None and stream.kind == "redis":
                from wavepp.telemetry.redis_stream import RedisSpanExporter, span_stream_processor
                processor = span_stream_processor(stream)
                assert isinstance(processor.exporter, RedisSpanExporter)
                self._stream = processor.exporter
                self.exporters.append(processor)
            if cfg.otlp:
                from wavepp.telemetry.otlp import otlp_processor
                self.exporters.append(otlp_processor(cfg))
        for p in self.exporters:
            self.provider.add_span_processor(p)
            if metrics is not None:
                metrics.spans_dropped_by(p.name, 0)      # exported at 0 from the start (Prometheus convention)
        # A run whose only reader of spans is its feed gets spans built for the feed alone (a fifth
        # of their cost; telemetry.feed_tracer); anything else reading spans gets the SDK's.
        others_read = keep or metrics is not None or ring_reads or bool(self.exporters)
        self.tracer: trace.Tracer
        if isinstance(feed, SpanFeed) and not others_read:
            self.tracer = FeedTracer(feed, run_id, self.now_ns)
        else:
            self.tracer = self.provider.get_tracer("wavepp")
        self._shut = False
        self._reported: dict[str, int] = {}      # drops already added to the metric, by exporter

    def now_ns(self) -> int:
        t = self._clock()
        if self._epoch_ns is None:
            self._epoch_ns = time.time_ns() - round(t * 1e9)
        return self._epoch_ns + round(t * 1e9)

    def at_ns(self, t: float) -> int:
        """The span timestamp of runtime-clock time ``t``."""
        self.now_ns()                      # fixes the epoch on first use
        return self.epoch_ns + round(t * 1e9)

    @property
    def epoch_ns(self) -> int:
        return self._epoch_ns if self._epoch_ns is not None else 0

    def span(self, name: str, attributes: Attributes | None = None, links: Sequence[Link] | None = None,
             parent: Span | None = None, cpu: bool = False) -> AbstractContextManager[Span]:
        """A child of ``parent`` (default: the current span), timed on the runtime clock; exceptions
        mark it as an error. ``cpu``: also record the CPU time this thread spent inside it
        (``wavepp.loop.cpu_s``: on a span of pure loop work, its time over this says how much of a
        core the loop had - what a what-if replay charges, :mod:`runtime.whatif.calibrate`)."""
        if not self.enabled:
            return _NOT_RECORDING
        return _SpanScope(self, name, attributes, links, parent, cpu)

    def start(self, name: str, attributes: Attributes | None = None, root: bool = False,
              link_to: Sequence[Span] = (), at: float | None = None) -> Span:
        """A span ended later by :meth:`end` (request and wave spans outlive any one coroutine),
        linked to the spans ``link_to`` (a wave to the requests it carries); ``at``: when it started,
        on the runtime clock, if earlier than now (a server's HTTP span starts at the request's acceptance)."""
        if not self.enabled:
            return trace.INVALID_SPAN
        ctx = trace.set_span_in_context(trace.INVALID_SPAN) if root else None
        links = [Link(s.get_span_context()) for s in link_to]
        return self.tracer.start_span(name, context=ctx, attributes=attributes, links=links,
                                      start_time=self.now_ns() if at is None else self.at_ns(at))

    @contextmanager
    def muted(self) -> Iterator[None]:
        """Nothing started inside is recorded, exported or metered (a run's unmeasured warm-up: the
        loop is sequential then, so every span of that time belongs to it)."""
        enabled, self.enabled = self.enabled, False
        try:
            yield
        finally:
            self.enabled = enabled

    def end(self, span: Span, error: str | None = None) -> None:
        if error is not None:
            span.set_status(Status(StatusCode.ERROR, error))
        span.end(end_time=self.now_ns())

    def event(self, span: Span, name: str, attributes: Attributes | None = None) -> None:
        span.add_event(name, attributes=attributes, timestamp=self.now_ns())

    def finished_spans(self) -> Sequence[ReadableSpan]:
        return list(self._list.spans)

    def status(self, snapshot: StatusSnapshot) -> None:
        """A status snapshot of the loop (queues, per-stage KV blocks): the metrics' gauges."""
        if self.metrics is not None:
            self.metrics.observe_status(snapshot.policy or self.policy, snapshot)   # the policy now

    def publish_run(self) -> None:
        """Write the run's label where viewers of the span stream list runs (its Redis run index)
        now, not with the first exported spans (an idle server has none); a no-op without a span
        stream. Best effort, like every export: a failure is one log line, never the run's. The
        caller's thread waits for one HSET (bounded by the exporter's 2 s socket timeout)."""
        if self._stream is None or not self.run_id:
            return
        try:
            self._stream.register_run(self.run_id, self.run_label)
        except ConnectionError as exc:
            log.warning("span stream: could not publish the run's label (%s); its first exported spans will", exc)

    def dropped(self) -> dict[str, int]:
        """Spans each exporter dropped so far (queue full, endpoint down), by exporter name."""
        return {p.name: p.dropped for p in self.exporters}

    def report_dropped(self) -> None:
        """Add the drops since the last report to ``wavepp_spans_dropped_total`` (a server at every
        scrape, so an outage shows while it lasts; every run at its shutdown)."""
        if self.metrics is None:
            return
        for p in self.exporters:
            now = p.dropped
            if now > self._reported.get(p.name, 0):
                self.metrics.spans_dropped_by(p.name, now - self._reported.get(p.name, 0))
                self._reported[p.name] = now

    def shutdown(self) -> None:
        """Flush the exporters (bounded: an unreachable endpoint's spans are dropped and counted)."""
        if self._shut:
            return
        self._shut = True
        self.provider.shutdown()
        self.report_dropped()
