"""``wavepp bench --url``: the load generator against a running ``wavepp serve``, one run per
concurrency of a closed loop (or of a capped trace), one run for an open loop or an uncapped trace;
the server's own settings apply, so the bench flags that would change them are refused."""

from __future__ import annotations

import argparse
import dataclasses
import json

from wavepp.runtime.cli.args import RunFailed, UsageError, write_text

#: bench flags that mean something with --url (the server's own settings decide the rest)
URL_FLAGS = {"url", "rate", "workload", "concurrency", "requests", "prompt_tokens", "seed", "json_path", "quiet",
             "trace_speed", "on_bad_line", "verbose", "command"}


def cmd_bench_url(args: argparse.Namespace, defaults: argparse.Namespace) -> int:
    """``args``: the bench's flags; ``defaults``: every bench flag at its default (a flag outside
    :data:`URL_FLAGS` that differs from it was given, and is refused)."""
    import asyncio

    from wavepp.runtime.bench.progress import BenchProgress, print_table
    from wavepp.runtime.bench.runs import run_concurrencies
    from wavepp.runtime.figures.report import fmt
    from wavepp.runtime.runs.runfile import load_label
    from wavepp.runtime.serve.loadgen import LoadError, LoadGenerator, UrlRun
    from wavepp.runtime.sources.trace_file import TraceError, load_trace
    from wavepp.runtime.sources.workloads import parse_workload

    given = sorted(f"--{k.replace('_', '-')}" for k, v in vars(args).items()
                   if k not in URL_FLAGS and getattr(defaults, k, v) != v)
    if given:
        raise UsageError(f"{', '.join(given)}: not with --url (the server's own settings apply)")
    if not args.url.startswith(("http://", "https://")):
        raise UsageError(f"--url must be http://HOST:PORT, got {args.url!r}")
    try:
        spec = parse_workload(args.workload or "reuse90")
        if spec.kind == "trace":
            spec = dataclasses.replace(spec, on_bad_line=args.on_bad_line, speed=args.trace_speed)
            load_trace(spec.path, spec.on_bad_line, args.requests)
            if args.rate is not None:
                raise ValueError("--rate: a trace replays its own arrivals (--trace-speed scales them)")
        concurrencies = run_concurrencies(args.concurrency, spec, args.rate)
    except (ValueError, TraceError) as exc:
        raise UsageError(str(exc)) from None
    requests = args.requests if spec.kind == "trace" else args.requests or max(512, 4 * max(concurrencies))
    runs: list[UrlRun] = []
    failure: BaseException | None = None
    with BenchProgress(disabled=args.quiet) as progress:
        try:
            for concurrency in concurrencies:
                gen = LoadGenerator(args.url, spec, requests, concurrency, args.rate, args.prompt_tokens, args.seed)
                runs.append(asyncio.run(gen.run(progress.update)))
        except LoadError as exc:
            failure = UsageError(str(exc)) if not runs else RunFailed(str(exc))
        except ValueError as exc:                  # the workload does not fit the server's limits
            failure = UsageError(str(exc))
    if runs:
        print_table([r.figures for r in runs])
        for r in runs:
            c = r.client.as_dict()
            latency = "/".join(fmt(c[f"latency_{q}_s"], ".3f") for q in ("p50", "p95", "p99"))
            print(f"clients {r.figures.policy} {load_label(r.figures.concurrency)}: "
                  f"{c['answered']}/{c['sent']} answered, "
                  f"{c['refused_429']} refused (429), {c['failed']} failed; "
                  f"{fmt(c['input_tokens_per_s'], ',.0f')} input tok/s; latency p50/p95/p99 {latency} s; "
                  f"HTTP overhead p50 {fmt(c['http_overhead_p50_s'], '.2f', 1e3)} ms")
    if args.json_path and runs:
        write_text(args.json_path, json.dumps({"runs": [r.as_dict() for r in runs]}, indent=1))
        print(f"wrote {args.json_path}")
    if failure is not None:
        raise failure
    failed = [r for r in runs if r.client.failed]
    if failed:
        count = sum(r.client.failed for r in failed)
        raise RunFailed(f"{count} request(s) failed, e.g. {failed[0].client.first_error}")
    return 0
