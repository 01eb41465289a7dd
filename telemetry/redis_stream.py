"""Span exporter to a capped Redis stream (``wavepp:{<cluster>}:spans``), which the dashboard reads.

Every span carries its run's id; the hash ``wavepp:{<cluster>}:runs`` maps each id to the run's
label, so a viewer lists runs by id without reading the whole stream. The exporter adds a run's
label with its first spans; :meth:`RedisSpanExporter.register_run` writes it at once (a run
publishes it at start, and again when the store came back empty).

The stream is open to every client of the Redis: a reader skips and counts what is not a span
(:func:`read_spans`), so one foreign entry never breaks a page that shows the stream.

Memory stays bounded: ``XADD … MAXLEN ~ cap`` trims the oldest entries. The exporter runs in the
batch processor's worker thread (``telemetry.batch``) with its own synchronous client; an
unreachable Redis fails that batch, which the processor counts as dropped and reports once: it
never disturbs the runtime.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any, NamedTuple

import redis
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from wavepp.store.urls import StoreUrl
from wavepp.telemetry.batch import DropCountingBatchProcessor
from wavepp.telemetry.span_codec import dumps, loads, run_of

log = logging.getLogger(__name__)

SPAN_STREAM_CAP = 200_000
# The longest run id + label the run index hands a viewer: a label names the policy, workload,
# concurrency, engine, store and start time (a few hundred bytes); a longer entry is another client's.
MAX_LABEL_BYTES = 1 << 16
_reported_long: set[str] = set()          # run indexes whose oversized entries were reported


def stream_key(url: StoreUrl) -> str:
    return f"wavepp:{{{url.cluster}}}:spans"


def runs_key(url: StoreUrl) -> str:
    return f"wavepp:{{{url.cluster}}}:runs"


class RedisSpanExporter(SpanExporter):
    def __init__(self, url: StoreUrl, cap: int = SPAN_STREAM_CAP) -> None:
        self.client = redis.Redis.from_url(url.url, socket_connect_timeout=1.0, socket_timeout=2.0)
        self.key = stream_key(url)
        self.runs_key = runs_key(url)
        self.cap = cap
        self._registered: set[str] = set()        # run ids whose label is in the runs hash

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        try:
            pipe = self.client.pipeline(transaction=False)
            new: dict[Any, Any] = {run_id: label for run_id, label in map(run_of, spans)
                                   if run_id and run_id not in self._registered}
            if new:
                pipe.hset(self.runs_key, mapping=new)
            for span in spans:
                pipe.xadd(self.key, {"s": dumps(span)}, maxlen=self.cap, approximate=True)
            pipe.execute()
            self._registered |= new.keys()
            return SpanExportResult.SUCCESS
        except redis.RedisError as exc:
            raise ConnectionError(f"Redis unreachable: {exc}") from None   # the processor reports it once

    def register_run(self, run_id: str, label: str) -> None:
        """Map ``run_id`` to ``label`` in the run index now: one HSET on this exporter's client, in
        the caller's thread (redis-py's pool is thread-safe). ConnectionError when Redis fails it."""
        try:
            self.client.hset(self.runs_key, run_id, label)
        except redis.RedisError as exc:
            raise ConnectionError(f"Redis unreachable: {exc}") from None
        self._registered.add(run_id)

    def shutdown(self) -> None:
        self.client.close()


def span_stream_processor(url: StoreUrl) -> DropCountingBatchProcessor:
    """Every recorded span reaches Redis within ~100 ms (``telemetry.setup`` attaches it). The queue
    is large because the virtual-time sim finishes spans far faster than real time."""
    return DropCountingBatchProcessor(RedisSpanExporter(url), "span-stream", "span stream", delay_s=0.1,
                                      max_queue=1 << 18, batch=4096, backoff_s=1.0)


class SpanRead(NamedTuple):
    spans: list[dict[str, Any]]      # in stream order
    last: str                        # the last stream id read, skipped entries included
    skipped: int                     # entries that were not spans (another client appended them)


def read_spans(client: redis.Redis, url: StoreUrl, after: str = "-", count: int = 10_000) -> SpanRead:
    """Spans appended after stream id ``after`` (exclusive; "-" = from the start). An entry that is
    not a span (no ``s`` field, or one :func:`telemetry.span_codec.loads` refuses) is skipped and
    counted; ``last`` moves past it, so the next read does not see it again."""
    start = "-" if after == "-" else f"({after}"
    rows: list[Any] = client.xrange(stream_key(url), min=start, count=count) or []
    spans = []
    for _, fields in rows:
        raw = fields.get(b"s")
        span = loads(raw) if raw is not None else None
        if span is not None:
            spans.append(span)
    last = rows[-1][0].decode() if rows else after
    return SpanRead(spans, last, len(rows) - len(spans))


class SpanStreamReader:
    """Reads the span stream on from where it left off, counting the entries it skipped
    (``skipped``) and saying so in one log line, the first time: a viewer polls every second."""

    def __init__(self, client: redis.Redis, url: StoreUrl) -> None:
        self.client = client
        self.url = url
        self.after = "-"
        self.skipped = 0

    def read(self) -> list[dict[str, Any]]:
        """The spans appended since the last read (at most one batch; empty once caught up)."""
        read = read_spans(self.client, self.url, self.after)
        self.after = read.last
        if read.skipped and not self.skipped:
            log.warning("span stream %s: skipped %d entries that are not spans (written by another client?); "
                        "later ones are counted, not reported", stream_key(self.url), read.skipped)
        self.skipped += read.skipped
        return read.spans


def read_run_labels(client: redis.Redis, url: StoreUrl) -> dict[str, str]:
    """Run id -> label of every run that streamed spans to this cluster. An entry longer than
    :data:`MAX_LABEL_BYTES` (another client's) is left out, with one log line the first time."""
    raw: dict[bytes, bytes] = client.hgetall(runs_key(url)) or {}  # type: ignore[assignment]
    long = [k for k, v in raw.items() if len(k) + len(v) > MAX_LABEL_BYTES]
    if long and runs_key(url) not in _reported_long:
        _reported_long.add(runs_key(url))
        log.warning("run index %s: left out %d entries over %d bytes (written by another client?)",
                    runs_key(url), len(long), MAX_LABEL_BYTES)
    # Bytes another client wrote need not be UTF-8: shown with replacement characters, never raised.
    return {k.decode(errors="replace"): v.decode(errors="replace") for k, v in raw.items()
            if len(k) + len(v) <= MAX_LABEL_BYTES}
