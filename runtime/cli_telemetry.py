"""The CLI's telemetry parts: ``--telemetry`` / ``--metrics-port`` on ``bench``, the side-by-side cost
summary of the telemetry modes, and ``wavepp trace export``."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from typing import Any

from wavepp.telemetry.config import MODES, TelemetryConfig


def telemetry_modes(text: str) -> list[str]:
    """``off,otlp`` -> ["off", "otlp"]: each run of the bench runs once per mode, back to back."""
    modes = [m.strip() for m in text.split(",")]
    bad = [m for m in modes if m not in MODES]
    if bad or not modes:
        raise argparse.ArgumentTypeError(f"{text!r}: modes are {', '.join(MODES)} (a list runs each, side by side)")
    return modes


def port(text: str) -> int:
    if not text.strip().isdigit() or int(text) > 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a TCP port (0-65535; 0 picks a free one)")
    return int(text)


def add_bench_flags(b: argparse.ArgumentParser) -> None:
    b.add_argument("--telemetry", type=telemetry_modes, default=["on"], metavar="MODES",
                   help="span export: off (figures still computed), on (ring, Redis stream, OTLP when "
                        "OTEL_EXPORTER_OTLP_ENDPOINT is set), otlp (OTLP required); a list runs each side by side")
    b.add_argument("--metrics-port", type=port, default=None,
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
    print("telemetry cost (input tok/s per mode; ratio to off; spans exported / dropped):")
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
            cells.append(f"{mode} {tput or 0:,.0f}{ratio}, {r.meta.get('spans', 0):,} spans"
                         + (f", {dropped:,} dropped" if dropped else ""))
        print(f"  {policy} c={c}: " + "; ".join(cells))


# ---- wavepp trace export --------------------------------------------------------------------------
def add_trace_parser(sub: Any, output_file: Callable[[str], str]) -> None:
    t = sub.add_parser("trace", help="convert a saved run's spans (wavepp bench --save-run) for other tools")
    tsub = t.add_subparsers(dest="trace_command", required=True, parser_class=type(t))
    e = tsub.add_parser("export", help="Chrome trace-event JSON (Perfetto) or OTLP/JSON (collectors, Jaeger)")
    e.add_argument("runfile", help="a file written by wavepp bench --save-run")
    e.add_argument("--format", choices=["chrome", "otlp-json"], default="chrome")
    e.add_argument("--out", type=output_file, required=True, help="where to write it")


def cmd_trace(args: argparse.Namespace, write_output: Callable[[str, Any], None]) -> int:
    from pathlib import Path

    from wavepp.runtime.runfile import load_runs
    from wavepp.telemetry.chrome_trace import write_trace
    from wavepp.telemetry.otlp_json import dumps_otlp_json

    runs = load_runs(args.runfile)              # ValueError (one line) when it is not a saved run
    if args.format == "chrome":
        write_output(args.out, lambda p: write_trace(p, ((r.label, r.spans, int(r.meta.get("pp", 1)))
                                                         for r in runs)))
    else:
        text = dumps_otlp_json([(r.id, r.label, r.spans) for r in runs])
        write_output(args.out, lambda p: Path(p).write_text(text))
    print(f"wrote {args.out} ({args.format}, {len(runs)} run(s), {sum(len(r.spans) for r in runs):,} spans)")
    return 0
