"""Span exporter to a capped Redis stream (``wavepp:{<cluster>}:spans``), which the dashboard reads.

Every span carries its run's id; the hash ``wavepp:{<cluster>}:runs`` maps each id to the run's
label, so a viewer lists runs by id without reading the whole stream.

Memory stays bounded: ``XADD … MAXLEN ~ cap`` trims the oldest entries. The exporter runs in the
batch span processor's thread with its own synchronous client; an unreachable Redis drops that
batch (export returns FAILURE, reported once) and never disturbs the runtime.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from typing import Any

import redis
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

from store.urls import StoreUrl
from telemetry.span_codec import dumps, run_of

log = logging.getLogger(__name__)

SPAN_STREAM_CAP = 200_000


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
        self.dropped = 0
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
            if not self.dropped:          # once: an outage would repeat it every 100 ms
                log.warning("span stream: dropping spans while Redis is unreachable: %s", exc)
            self.dropped += len(spans)
            return SpanExportResult.FAILURE

    def shutdown(self) -> None:
        self.client.close()


def span_stream_processor(url: StoreUrl) -> BatchSpanProcessor:
    """Attach with ``Telemetry.add_span_processor``: spans reach Redis within ~100 ms. The queue is
    large because the virtual-time sim finishes spans far faster than real time."""
    return BatchSpanProcessor(RedisSpanExporter(url), schedule_delay_millis=100, max_queue_size=1 << 18,
                              max_export_batch_size=4096)


def read_spans(client: redis.Redis, url: StoreUrl, after: str = "-",
               count: int = 10_000) -> tuple[list[dict[str, Any]], str]:
    """Spans appended after stream id ``after`` (exclusive; "-" = from the start), and the last id read."""
    start = "-" if after == "-" else f"({after}"
    rows: list[Any] = client.xrange(stream_key(url), min=start, count=count) or []
    spans = [json.loads(fields[b"s"]) for _, fields in rows]
    last = rows[-1][0].decode() if rows else after
    return spans, last


def read_run_labels(client: redis.Redis, url: StoreUrl) -> dict[str, str]:
    """Run id -> label of every run that streamed spans to this cluster."""
    raw: dict[bytes, bytes] = client.hgetall(runs_key(url)) or {}  # type: ignore[assignment]
    return {k.decode(): v.decode() for k, v in raw.items()}
