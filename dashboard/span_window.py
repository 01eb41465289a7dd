"""A live source's window of recent spans, held encoded.

A live run's window holds up to :data:`dashboard.sources.LIVE_SPANS_KEPT` spans. Held as dicts they are
several hundred thousand containers the garbage collector walks on every full collection (0.3 s at
250,000 spans, landing on whatever page draw is running); held as one JSON ``bytes`` each they are
about 0.5 KB a span (130 MB at 250,000) and never walked. The tables and figures are derived as spans
arrive (:mod:`dashboard.view`), so the window is read back whole only when a view is rebuilt or a
what-if replays the recent arrivals; a read decodes what it touches.
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, overload

import orjson

Span = dict[str, Any]


def encode(span: Span) -> bytes:
    """The span's JSON, in a bytes object of its own size: orjson's own result keeps its writer's buffer
    (4.4 KB of memory a span, measured, where the JSON is 0.5 KB), so it is copied out."""
    try:
        return bytes(memoryview(orjson.dumps(span)))
    except TypeError:                        # what orjson does not write (an integer past 64 bits): json's form
        return json.dumps(span, separators=(",", ":")).encode()


def decode(raw: bytes) -> Span:
    try:
        span: Span = orjson.loads(raw)
    except orjson.JSONDecodeError:           # json's own form of what orjson does not read (NaN, big integers)
        span = json.loads(raw)
    return span


class Spans(Sequence[Span]):
    """A fixed sequence of encoded spans, decoded on each read."""

    def __init__(self, raw: Sequence[bytes]) -> None:
        self._raw = raw

    def __len__(self) -> int:
        return len(self._raw)

    @overload
    def __getitem__(self, i: int) -> Span: ...

    @overload
    def __getitem__(self, i: slice) -> list[Span]: ...

    def __getitem__(self, i: int | slice) -> Span | list[Span]:
        if isinstance(i, slice):
            return [decode(r) for r in self._raw[i]]
        return decode(self._raw[i])

    def __iter__(self) -> Iterator[Span]:
        return (decode(r) for r in self._raw)


class SpanWindow:
    """The newest ``maxlen`` spans appended, encoded; :meth:`spans` is a fixed copy to read."""

    def __init__(self, maxlen: int) -> None:
        self._raw: deque[bytes] = deque(maxlen=maxlen)

    def extend(self, spans: Iterable[Span]) -> None:
        self._raw.extend(encode(s) for s in spans)

    def clear(self) -> None:
        self._raw.clear()

    def __len__(self) -> int:
        return len(self._raw)

    def __bool__(self) -> bool:
        return bool(self._raw)

    def spans(self) -> Spans:
        return Spans(tuple(self._raw))
