"""``bench``'s telemetry parts: ``--telemetry`` / ``--metrics-port``, and the side-by-side cost
summary of the telemetry modes."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

from wavepp.runtime.cli.args import port_number
from wavepp.telemetry.config import MODES, TelemetryConfig


def telemetry_modes(text: str) -> list[str]:
    """``off,otlp`` -> ["off", "otlp"]: each run of the bench runs once per mode, back to back."""
    modes = [m.strip() for m in text.split(",")]
    bad = [m for m in modes if m not in MODES]
    if bad or not modes:
        raise argparse.ArgumentTypeError(f"{text!r}: modes are {', '.join(MODES)} (a list runs each, side by side)")
    return modes


def add_flags(b: argparse.ArgumentParser) -> None:
    b.add_argument("--telemetry", type=telemetry_modes, default=["on"], metavar="MODES",
                   help="span export: off (figures still computed), on (ring, Redis stream, OTLP when "
                        "OTEL_EXPORTER_OTLP_ENDPOINT is set), otlp (OTLP required); a list runs each side by side")
    b.add_argument("--metrics-port", type=port_number, default=None,
                   help="serve Prometheus metrics at http://127.0.0.1:PORT/metrics while the bench runs")


def apply(args: argparse.Namespace) -> None:
    """Read the ``OTEL_*`` environment with the flags (ConfigError, a ValueError, on a bad value) and
    start the metrics endpoint when asked."""
    from wavepp.telemetry.metrics import process_metrics
    from wavepp.telemetry.setup import configure

    cfg = TelemetryConfig.from_env(metrics_port=args.metrics_port)
    configure(cfg)
    if cfg.metrics_port is not None:
        try:
            bound = process_metrics().serve(cfg.metrics_port)
        except OSError as exc:
            raise ValueError(f"--metrics-port {cfg.metrics_port}: {exc.strerror or exc}") from None
        print(f"metrics: http://127.0.0.1:{bound}/metrics")


def print_cost(records: Sequence[Any]) -> None:
    """With several ``--telemetry`` modes: each pair's throughput per mode and its ratio to ``off``."""
    if len({r.meta.get("telemetry") for r in records}) < 2:
        return
    print("telemetry cost (input tok/s per mode; ratio to off; spans recorded - every mode records them for "
          "the figures, off exports none - and those an exporter dropped):")
    groups: dict[tuple[str, int], dict[str, Any]] = {}
    for r in records:
        groups.setdefault((r.figures.policy, r.figures.concurrency), {})[r.meta["telemetry"]] = r
    for (policy, c), by_mode in groups.items():
        off = by_mode.get("off")
        base = off.figures.input_tokens_per_s if off is not None else None
        cells = []
        for mode, r in by_mode.items():
            tput = r.figures.input_tokens_per_s
            ratio = f" ({tput / base:.3f})" if tput and base else ""
            dropped = sum(r.meta.get("spans_dropped", {}).values())
            cells.append(f"{mode} {tput or 0:,.0f}{ratio}, {r.meta.get('spans', 0):,} spans recorded"
                         + (", none exported" if mode == "off" else "")
                         + (f", {dropped:,} dropped" if dropped else ""))
        print(f"  {policy} c={c}: " + "; ".join(cells))
