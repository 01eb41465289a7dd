"""Telemetry settings from the OTEL_* environment and the flags; a bad value is one line, exit 2."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from wavepp.telemetry.config import ConfigError, TelemetryConfig

WAVEPP = Path(sys.executable).parent / "wavepp"


def test_standard_variables() -> None:
    cfg = TelemetryConfig.from_env({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318/",
                                    "OTEL_TRACES_SAMPLER": "parentbased_traceidratio",
                                    "OTEL_TRACES_SAMPLER_ARG": "0.25",
                                    "OTEL_EXPORTER_OTLP_TIMEOUT": "2500"})
    assert cfg.otlp and cfg.ratio == 0.25 and cfg.timeout_s == 2.5
    assert cfg.traces_url() == "http://collector:4318/v1/traces"
    grpc = TelemetryConfig.from_env({"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, mode="otlp")
    assert grpc.traces_url() == "http://localhost:4317"
    assert not TelemetryConfig.from_env({}).otlp                           # no endpoint: no OTLP
    off = TelemetryConfig.from_env({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, mode="off")
    assert not off.otlp and not off.exports
    explicit = TelemetryConfig.from_env({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:9/x"})
    assert explicit.traces_url() == "http://c:9/x"


@pytest.mark.parametrize("env, message", [
    ({"OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"}, "OTEL_EXPORTER_OTLP_PROTOCOL"),
    ({"OTEL_TRACES_SAMPLER": "sometimes"}, "OTEL_TRACES_SAMPLER"),
    ({"OTEL_TRACES_SAMPLER_ARG": "1.5"}, "not a ratio"),
    ({"OTEL_TRACES_SAMPLER_ARG": "nan"}, "OTEL_TRACES_SAMPLER_ARG"),
    ({"OTEL_EXPORTER_OTLP_ENDPOINT": "collector:4318"}, "http:// or https://"),
    ({"OTEL_EXPORTER_OTLP_TIMEOUT": "-1"}, "OTEL_EXPORTER_OTLP_TIMEOUT"),
])
def test_bad_values_are_refused(env: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        TelemetryConfig.from_env(env)


@pytest.mark.parametrize("args, env, message", [
    (["--telemetry", "loud"], {}, "--telemetry"),
    (["--metrics-port", "70000"], {}, "--metrics-port"),
    ([], {"OTEL_TRACES_SAMPLER": "sometimes"}, "OTEL_TRACES_SAMPLER"),
])
def test_cli_refuses_in_one_line(args: list[str], env: dict[str, str], message: str) -> None:
    r = subprocess.run([str(WAVEPP), "bench", "--requests", "4", "--concurrency", "2", "--quiet", *args],
                       capture_output=True, text=True, timeout=60, env={**os.environ, **env})
    assert r.returncode == 2
    assert r.stderr.count("\n") == 1 and message in r.stderr and r.stderr.startswith("wavepp: error:")
