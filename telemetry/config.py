"""What an operator configures: the standard ``OTEL_*`` environment variables and a few wavepp flags.

Read once (``TelemetryConfig.from_env``), checked field by field: a bad value is one line
(``ConfigError``) before any work starts, never a traceback in the middle of a run.

=================================  ==========================================================
``OTEL_EXPORTER_OTLP_ENDPOINT``    base URL of a collector; its presence turns OTLP export on
``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``  full traces URL (overrides the base one)
``OTEL_EXPORTER_OTLP_PROTOCOL``    ``http/protobuf`` (default) or ``grpc``
``OTEL_EXPORTER_OTLP_TIMEOUT``     per export request, milliseconds (default 10000)
``OTEL_TRACES_SAMPLER``            ``parentbased_traceidratio`` (default), ``traceidratio``,
                                   ``always_on``, ``always_off``, ``parentbased_always_on``,
                                   ``parentbased_always_off``
``OTEL_TRACES_SAMPLER_ARG``        the ratio for the ratio samplers (default 1.0)
``OTEL_SERVICE_NAME``, ``OTEL_RESOURCE_ATTRIBUTES``  the resource (read by the SDK itself)
=================================  ==========================================================

Sampling decides only what is *exported* (OTLP); the figures, the metrics, the dashboard's ring and
the Redis span stream see every span, so they stay exact at any ratio.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, replace

MODES = ("off", "on", "otlp")
PROTOCOLS = ("http/protobuf", "grpc")
SAMPLERS = ("always_on", "always_off", "traceidratio", "parentbased_always_on", "parentbased_always_off",
            "parentbased_traceidratio")
DEFAULT_HTTP_ENDPOINT = "http://localhost:4318"
DEFAULT_GRPC_ENDPOINT = "http://localhost:4317"


class ConfigError(ValueError):
    """A telemetry setting that cannot be used; the message is the whole line."""


@dataclass(frozen=True, slots=True)
class TelemetryConfig:
    """``mode``: ``off`` exports no span anywhere (figures are still computed from the run's own
    spans); ``on`` exports to the ring / Redis stream, and over OTLP when an endpoint is set;
    ``otlp`` is ``on`` with OTLP required (the default endpoint when none is set)."""

    mode: str = "on"
    otlp_endpoint: str | None = None          # base URL (http) or host:port URL (grpc); None: no OTLP
    otlp_traces_url: str | None = None        # the full traces URL when given explicitly
    protocol: str = "http/protobuf"
    timeout_s: float = 10.0
    sampler: str = "parentbased_traceidratio"
    ratio: float = 1.0
    metrics_port: int | None = None           # serve Prometheus exposition here (None: no endpoint)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, mode: str | None = None,
                 metrics_port: int | None = None) -> TelemetryConfig:
        env = os.environ if env is None else env
        protocol = env.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or env.get("OTEL_EXPORTER_OTLP_PROTOCOL") \
            or "http/protobuf"
        if protocol not in PROTOCOLS:
            raise ConfigError(f"OTEL_EXPORTER_OTLP_PROTOCOL: {protocol!r} is not one of {', '.join(PROTOCOLS)}")
        sampler = (env.get("OTEL_TRACES_SAMPLER") or "parentbased_traceidratio").strip().lower()
        if sampler not in SAMPLERS:
            raise ConfigError(f"OTEL_TRACES_SAMPLER: {sampler!r} is not one of {', '.join(SAMPLERS)}")
        ratio = _ratio(env.get("OTEL_TRACES_SAMPLER_ARG"))
        timeout_ms = _number("OTEL_EXPORTER_OTLP_TIMEOUT", env.get("OTEL_EXPORTER_OTLP_TIMEOUT"), 10_000.0)
        cfg = cls(protocol=protocol, sampler=sampler, ratio=ratio, timeout_s=timeout_ms / 1e3,
                  otlp_endpoint=_url("OTEL_EXPORTER_OTLP_ENDPOINT", env.get("OTEL_EXPORTER_OTLP_ENDPOINT")),
                  otlp_traces_url=_url("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                                       env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")))
        return cfg.with_flags(mode, metrics_port)

    def with_flags(self, mode: str | None = None, metrics_port: int | None = None) -> TelemetryConfig:
        """The flags override the environment: ``--telemetry`` and ``--metrics-port``."""
        cfg = self
        if mode is not None:
            if mode not in MODES:
                raise ConfigError(f"--telemetry: {mode!r} is not one of {', '.join(MODES)}")
            cfg = replace(cfg, mode=mode)
        if metrics_port is not None:
            if not 0 <= metrics_port <= 65535:
                raise ConfigError(f"--metrics-port: {metrics_port} is not a TCP port (0-65535; 0 picks a free one)")
            cfg = replace(cfg, metrics_port=metrics_port)
        if cfg.mode == "otlp" and cfg.otlp_endpoint is None and cfg.otlp_traces_url is None:
            default = DEFAULT_GRPC_ENDPOINT if cfg.protocol == "grpc" else DEFAULT_HTTP_ENDPOINT
            cfg = replace(cfg, otlp_endpoint=default)
        return cfg

    @property
    def exports(self) -> bool:
        """Any span leaves the run (ring, Redis stream, OTLP)."""
        return self.mode != "off"

    @property
    def otlp(self) -> bool:
        return self.exports and (self.otlp_endpoint is not None or self.otlp_traces_url is not None)

    def traces_url(self) -> str:
        """Where OTLP spans go: the explicit traces URL, else the base URL + ``/v1/traces`` (HTTP) or
        the base URL itself (gRPC, where the path is the service's)."""
        if self.otlp_traces_url:
            return self.otlp_traces_url
        base = self.otlp_endpoint or (DEFAULT_GRPC_ENDPOINT if self.protocol == "grpc" else DEFAULT_HTTP_ENDPOINT)
        return base if self.protocol == "grpc" else base.rstrip("/") + "/v1/traces"


def _ratio(raw: str | None) -> float:
    if raw is None or raw.strip() == "":
        return 1.0
    value = _number("OTEL_TRACES_SAMPLER_ARG", raw, 1.0)
    if not 0.0 <= value <= 1.0:
        raise ConfigError(f"OTEL_TRACES_SAMPLER_ARG: {raw!r} is not a ratio in [0, 1]")
    return value


def _number(name: str, raw: str | None, default: float) -> float:
    if raw is None or raw.strip() == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(f"{name}: {raw!r} is not a number") from None
    if not math.isfinite(value) or value < 0:
        raise ConfigError(f"{name}: {raw!r} must be a finite number >= 0")
    return value


def _url(name: str, raw: str | None) -> str | None:
    if raw is None or raw.strip() == "":
        return None
    raw = raw.strip()
    if not raw.startswith(("http://", "https://")):
        raise ConfigError(f"{name}: {raw!r} must be an http:// or https:// URL")
    return raw
