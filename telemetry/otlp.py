"""OTLP span export (HTTP/protobuf or gRPC) to an operator's collector, Jaeger or Tempo.

The SDK's exporters retry with backoff and log every attempt; under an unreachable collector that
would be a line every few seconds. Their loggers are quietened here and the batch processor
(``telemetry.batch``) says it once, counts the drops and stops queueing for a while, so a dead
endpoint never stops or slows a run.
"""

from __future__ import annotations

import logging

from opentelemetry.sdk.trace.export import SpanExporter

from wavepp.telemetry.batch import DropCountingBatchProcessor
from wavepp.telemetry.config import TelemetryConfig

_SDK_EXPORTER_LOGGERS = ("opentelemetry.exporter.otlp",)   # http and grpc exporters, their clients


def otlp_exporter(cfg: TelemetryConfig) -> SpanExporter:
    url = cfg.traces_url()
    if cfg.protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcExporter

        return GrpcExporter(endpoint=url, insecure=url.startswith("http://"), timeout=cfg.timeout_s)
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpExporter

    return HttpExporter(endpoint=url, timeout=cfg.timeout_s)


def otlp_processor(cfg: TelemetryConfig) -> DropCountingBatchProcessor:
    """Sampled spans only, batched off the loop's thread; an endpoint that fails is skipped for 5 s."""
    for name in _SDK_EXPORTER_LOGGERS:
        logging.getLogger(name).setLevel(logging.CRITICAL)
    return DropCountingBatchProcessor(otlp_exporter(cfg), "otlp", f"OTLP {cfg.protocol} {cfg.traces_url()}",
                                      sampled_only=True, max_queue=1 << 17, batch=2048, delay_s=0.5)
