"""Span exporter to a capped Redis stream (``wavepp:{<cluster>}:spans``), which the dashboard reads.

Every span carries its run's id; the hash ``wavepp:{<cluster>}:runs`` maps each id to the run's
label, so a viewer lists runs by id without reading the whole stream.

Memory stays bounded: ``XADD … MAXLEN ~ cap`` trims the oldest entries. The exporter runs in the
batch processor's worker thread (``telemetry.batch``) with its own synchronous client; an
unreachable Redis fails that batch, which the processor counts as dropped and reports once: it
never disturbs the runtime.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import redis
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from store.urls import StoreUrl
from telemetry.batch import DropCountingBatchProcessor
from telemetry.span_codec import dumps, run_of

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

    def shutdown(self) -> None:
        self.client.close()


def span_stream_processor(url: StoreUrl) -> DropCountingBatchProcessor:
    """Every recorded span reaches Redis within ~100 ms (``telemetry.setup`` attaches it). The queue
    is large because the virtual-time sim finishes spans far faster than real time."""
    return DropCountingBatchProcessor(RedisSpanExporter(url), "span-stream", "span stream", delay_s=0.1,
                                      max_queue=1 << 18, batch=4096, backoff_s=1.0)


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
