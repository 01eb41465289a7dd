"""A tracer for a run whose spans only feed its figures: OpenTelemetry API spans that, as they end,
hand :mod:`telemetry.span_codec`'s compact form straight to a :class:`~telemetry.feed.SpanFeed`.

A bench run that saves nothing, exports nothing and meters nothing reads its spans only through the
feed; there the SDK's span (a lock, attribute validation into a bounded mapping, a sampler chain,
random ids, a processor fan-out, then :func:`~telemetry.span_codec.encode` of the finished span)
cost about 100 us a span on this machine against about 20 us for this one - a fifth of a
sim replay's wall time. Whatever else wants a run's spans (a saved run, a trace, metrics, OTLP, the
Redis span stream, the dashboard's ring) gets the SDK's, as before: :class:`telemetry.setup.Telemetry`
picks this tracer only when the feed is the one consumer, and ``tests/test_feed_tracer.py`` holds the
two to the same compact spans and the same figures.

What the SDK does and this keeps: a parent from the context (its trace id, or a new trace), the
start and end times given, attributes set before the end (cleaned by the SDK's own function),
events with their timestamps, links to
valid span contexts, the status rules (OK is final; UNSET ignored) and calls after the end ignored.
What it leaves out, having no reader for it: span limits (WavePP's spans carry a dozen attributes,
the SDK's limit is 128), sampling flags (nothing is exported) and random span ids: span ids count up from 1
within the run, which is all the figures ask of them (that they are unique and name a parent); a
trace id is the run's random 64 bits and its root's number, so two runs' traces never share one.
"""

from __future__ import annotations

import itertools
import logging
import secrets
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from opentelemetry import trace
from opentelemetry.attributes import _clean_attribute_value  # the SDK's own rules, to match them exactly
from opentelemetry.context import Context
from opentelemetry.trace import Link, SpanContext, SpanKind, Status, StatusCode, TraceFlags
from opentelemetry.util._decorator import _agnosticcontextmanager
from opentelemetry.util.types import Attributes, AttributeValue

from wavepp.telemetry.feed import SpanFeed

log = logging.getLogger(__name__)

_SCALARS = (bool, str, int, float, type(None))
_SAMPLED = TraceFlags(TraceFlags.SAMPLED)


def _attribute(value: Any) -> Any:
    """The value the compact form carries for ``value``: the SDK's cleaning of it (which keeps
    ``None``, mappings and bytes, makes a sequence a tuple and logs what it must replace), the
    outer tuple written as a list as :func:`~telemetry.span_codec.encode` writes it."""
    if isinstance(value, _SCALARS):
        return value
    cleaned = _clean_attribute_value(value, None)
    return list(cleaned) if isinstance(cleaned, tuple) else cleaned


_SCALAR_TYPES = frozenset(_SCALARS)


def _attributes(into: dict[str, Any], attributes: Mapping[str, Any] | None) -> dict[str, Any]:
    for key, value in (attributes or {}).items():
        if key.__class__ is str and key and value.__class__ in _SCALAR_TYPES:
            into[key] = value               # the usual attribute: as _is_key and _attribute keep it, no call
        elif _is_key(key):
            into[key] = _attribute(value)
    return into


def _is_key(key: Any) -> bool:
    if key and isinstance(key, str):
        return True
    log.warning("span attribute key %r is not a non-empty string; dropped", key)
    return False


class FeedSpan(trace.Span):
    """A recording span whose only destination is its tracer's feed."""

    __slots__ = ("_tracer", "_name", "_context", "_parent", "_start", "_attrs", "_events", "_links",
                 "_error", "_ok", "_ended")

    def __init__(self, tracer: FeedTracer, name: str, context: SpanContext, parent: SpanContext | None,
                 start_time: int, attributes: Attributes, links: Sequence[Link] | None) -> None:
        self._tracer, self._name, self._context, self._parent = tracer, name, context, parent
        self._start = start_time
        self._attrs: dict[str, Any] = _attributes({}, attributes)
        self._events: list[list[Any]] = []
        self._links: list[str] = [f"{link.context.span_id:016x}" for link in links or () if link.context.is_valid]
        self._error: str | None = None
        self._ok = False
        self._ended = False

    def get_span_context(self) -> SpanContext:
        return self._context

    @property
    def name(self) -> str:
        return self._name

    @property
    def start_time(self) -> int:
        """As the SDK's span has it (the runtime reads a request's start back from its span)."""
        return self._start

    def is_recording(self) -> bool:
        return not self._ended

    def set_attributes(self, attributes: Mapping[str, AttributeValue]) -> None:
        if not self._ended:
            _attributes(self._attrs, attributes)

    def set_attribute(self, key: str, value: AttributeValue) -> None:
        if not self._ended and _is_key(key):
            self._attrs[key] = _attribute(value)

    def add_event(self, name: str, attributes: Attributes = None, timestamp: int | None = None) -> None:
        if not self._ended:
            self._events.append([name, timestamp if timestamp is not None else self._tracer.now_ns(),
                                 _attributes({}, attributes)])

    def add_link(self, context: SpanContext, attributes: Attributes = None) -> None:
        if not self._ended and context.is_valid:
            self._links.append(f"{context.span_id:016x}")

    def update_name(self, name: str) -> None:
        if not self._ended:
            self._name = name

    def set_status(self, status: Status | StatusCode, description: str | None = None) -> None:
        if self._ended or self._ok:
            return
        code, text = (status.status_code, status.description) if isinstance(status, Status) else (status, description)
        if code is StatusCode.OK:
            self._ok, self._error = True, None
        elif code is StatusCode.ERROR:
            self._error = text or "error"

    def record_exception(self, exception: BaseException, attributes: Attributes = None,
                         timestamp: int | None = None, escaped: bool = False) -> None:
        self.add_event("exception", {"exception.type": type(exception).__name__,
                                     "exception.message": str(exception)} | dict(attributes or {}), timestamp)

    def end(self, end_time: int | None = None) -> None:
        if self._ended:
            return
        self._ended = True
        self._tracer.finished(self, end_time if end_time is not None else self._tracer.now_ns())

    def compact(self, end_time: int, run: str) -> dict[str, Any]:
        """:func:`telemetry.span_codec.encode` of the SDK span this one stands for."""
        ctx = self._context
        out: dict[str, Any] = {"n": self._name, "t0": self._start, "t1": end_time, "a": self._attrs,
                               "id": f"{ctx.span_id:016x}", "tr": f"{ctx.trace_id:032x}"}
        if run:
            out["run"] = run
        if self._parent is not None:
            out["p"] = f"{self._parent.span_id:016x}"
        if self._error is not None:
            out["err"] = self._error
        if self._events:
            out["ev"] = self._events
        if self._links:
            out["ln"] = self._links
        return out


class FeedTracer(trace.Tracer):
    """Starts :class:`FeedSpan`s; ``now_ns`` times what a caller does not (an event, an end)."""

    def __init__(self, feed: SpanFeed, run_id: str, now_ns: Any) -> None:
        self._feed = feed
        self._run = run_id
        self.now_ns = now_ns
        self._ids = itertools.count(1)
        # A trace id is the run's random high half and its root span's number: unique across runs, as
        # the SDK's random ids are, where saved runs' traces meet in one collector (trace export).
        self._trace_base = (secrets.randbits(64) | 1) << 64

    def start_span(self, name: str, context: Context | None = None, kind: SpanKind = SpanKind.INTERNAL,
                   attributes: Attributes = None, links: Sequence[Link] | None = None,
                   start_time: int | None = None, record_exception: bool = True,
                   set_status_on_exception: bool = True) -> FeedSpan:
        current = trace.get_current_span(context).get_span_context()
        span_id = next(self._ids)
        parent = current if current.is_valid else None
        trace_id = parent.trace_id if parent is not None else self._trace_base | span_id
        ctx = SpanContext(trace_id, span_id, False, _SAMPLED)
        return FeedSpan(self, name, ctx, parent, start_time if start_time is not None else self.now_ns(),
                        attributes, links)

    @_agnosticcontextmanager            # what the API's Tracer declares (the SDK's tracer uses it too)
    def start_as_current_span(self, name: str, context: Context | None = None, kind: SpanKind = SpanKind.INTERNAL,
                              attributes: Attributes = None, links: Sequence[Link] | None = None,
                              start_time: int | None = None, record_exception: bool = True,
                              set_status_on_exception: bool = True, end_on_exit: bool = True) -> Iterator[trace.Span]:
        span = self.start_span(name, context, kind, attributes, links, start_time)
        with trace.use_span(span, end_on_exit=end_on_exit, record_exception=record_exception,
                            set_status_on_exception=set_status_on_exception):
            yield span

    def finished(self, span: FeedSpan, end_time: int) -> None:
        self._feed.put(span.compact(end_time, self._run))
