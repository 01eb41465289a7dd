"""A bounded in-process span log for live views without Redis (the embedded dashboard).

A span processor that keeps the last ``capacity`` finished spans in compact form, each with a
sequence number, so a reader polls ``read(after)`` for what is new. Thread-safe: the runtime
appends from its loop thread, the dashboard reads from its own.
"""

from __future__ import annotations

import itertools
import threading
from collections import deque
from typing import Any

from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor

from wavepp.telemetry.span_codec import encode


class SpanRing(SpanProcessor):
    def __init__(self, capacity: int = 200_000) -> None:      # ~0.7 KB a span: ~140 MB full
        self._spans: deque[tuple[int, dict[str, Any]]] = deque(maxlen=capacity)
        self._lock = threading.Lock()
        self._seq = 0

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        return None

    def on_end(self, span: ReadableSpan) -> None:
        item = encode(span)
        with self._lock:
            self._seq += 1
            self._spans.append((self._seq, item))

    def read(self, after: int = 0) -> tuple[list[dict[str, Any]], int]:
        """Spans with sequence number > ``after`` still held, and the last sequence number."""
        with self._lock:
            # Sequence numbers are consecutive and newest last: walk back from the end over the new
            # spans only (a reader polling every second pays for that second, not the ring).
            new = min(max(self._seq - after, 0), len(self._spans))
            items = [s for _, s in itertools.islice(reversed(self._spans), new)]
            items.reverse()
            return items, self._seq

    def shutdown(self) -> None:
        return None

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True
