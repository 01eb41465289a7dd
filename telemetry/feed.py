"""A span processor that hands every recorded span, in compact form, to a consumer as it ends.

The run's figures are computed this way (``runtime.figures.report.FigureAccumulator``): each span is
folded into counters and dropped, so a run keeps its spans only when something asked for them
(a saved run, a trace). Thread-safe: the runtime may end spans from more than one thread.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor

from wavepp.telemetry.span_codec import encode


class SpanFeed(SpanProcessor):
    """Spans are handed over in batches of ``batch`` (a consumer's per-call work paid once per
    batch), in the order they ended; :meth:`flush` hands over the rest - call it before reading
    what the consumer made of them."""

    def __init__(self, consume: Callable[[list[dict[str, Any]]], Any], batch: int = 256) -> None:
        """``consume``: called with a list of compact spans (``span_codec.encode``)."""
        self._consume = consume
        self._batch = batch
        self._pending: list[dict[str, Any]] = []
        self._lock = threading.Lock()

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        return None

    def on_end(self, span: ReadableSpan) -> None:
        self.put(encode(span))

    def put(self, item: dict[str, Any]) -> None:
        """Hand over one span already in compact form (``telemetry.feed_tracer``'s spans end this way)."""
        with self._lock:
            self._pending.append(item)
            if len(self._pending) >= self._batch:
                self._hand_over()

    def flush(self) -> None:
        with self._lock:
            self._hand_over()

    def _hand_over(self) -> None:
        pending, self._pending = self._pending, []
        if pending:
            self._consume(pending)

    def shutdown(self) -> None:
        self.flush()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        self.flush()
        return True
