"""``wavepp trace export``: a saved run's spans (``bench --save-run``) as Chrome trace-event JSON
(Perfetto) or OTLP/JSON (collectors, Jaeger)."""

from __future__ import annotations

import argparse
from typing import Any

from wavepp.runtime.cli.args import Handler, UsageError, output_file, write_output, write_text


def register(sub: Any) -> dict[str, Handler]:
    t = sub.add_parser("trace", help="convert a saved run's spans (wavepp bench --save-run) for other tools")
    tsub = t.add_subparsers(dest="trace_command", required=True, parser_class=type(t))
    e = tsub.add_parser("export", help="Chrome trace-event JSON (Perfetto) or OTLP/JSON (collectors, Jaeger)")
    e.add_argument("runfile", help="a file written by wavepp bench --save-run")
    e.add_argument("--format", choices=["chrome", "otlp-json"], default="chrome",
                   help="chrome: trace-event JSON for Perfetto / chrome://tracing; otlp-json: OTLP/JSON for collectors")
    e.add_argument("--out", type=output_file, required=True, help="where to write it")
    return {"trace": cmd_trace}


def cmd_trace(args: argparse.Namespace) -> int:
    try:
        return _export(args)
    except ValueError as exc:                       # not a saved run, or spans that do not convert
        raise UsageError(str(exc)) from None


def _export(args: argparse.Namespace) -> int:
    from wavepp.runtime.runs.runfile import load_runs
    from wavepp.telemetry.chrome_trace import write_trace
    from wavepp.telemetry.otlp_json import dumps_otlp_json

    runs = load_runs(args.runfile)              # ValueError (one line) when it is not a saved run
    if args.format == "chrome":
        write_output(args.out, lambda p: write_trace(p, ((r.label, r.spans, int(r.meta.get("pp", 1)))
                                                         for r in runs)))
    else:
        write_text(args.out, dumps_otlp_json([(r.id, r.label, r.spans) for r in runs]))
    print(f"wrote {args.out} ({args.format}, {len(runs)} run(s), {sum(len(r.spans) for r in runs):,} spans)")
    return 0
