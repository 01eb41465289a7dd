"""A span processor that hands every recorded span, in compact form, to a consumer as it ends.

The run's figures are computed this way (``runtime.report.FigureAccumulator``): each span is
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
    def __init__(self, consume: Callable[[list[dict[str, Any]]], Any]) -> None:
        """``consume``: called with a list of one compact span (``span_codec.encode``) per span."""
        self._consume = consume
        self._lock = threading.Lock()

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        return None

    def on_end(self, span: ReadableSpan) -> None:
        item = encode(span)
        with self._lock:
            self._consume([item])

    def shutdown(self) -> None:
        return None

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True
