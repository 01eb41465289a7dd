"""The ``wavepp`` command. Thin: parse, validate, call; every bad value is one line and exit 2."""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import signal
import sys
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn, TypeVar

from wavepp.runtime import cli_telemetry
from wavepp.runtime.engines.launchers import LAUNCHER_HELP, LAUNCHERS
from wavepp.runtime.engines.sim.perf_tables import PERF_DIR_ENV

EXIT_USAGE = 2
EXIT_FAILED = 1


class UsageError(Exception):
    """A bad flag value: reported as one line, exit code 2."""


class RunFailed(Exception):
    """A failure during the run (a store that never came back, an output that cannot be written,
    every request failed): reported as one line, exit code 1."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:   # argparse prints usage + message; we want one line
        raise UsageError(message)


def int_list(text: str) -> list[int]:
    """``8,32,128`` -> [8, 32, 128]; each a positive integer."""
    parts = text.split(",")
    out = []
    for p in parts:
        p = p.strip()
        if not p.lstrip("-").isdigit():
            raise argparse.ArgumentTypeError(f"malformed list {text!r}: {p!r} is not an integer")
        if int(p) < 1:
            raise argparse.ArgumentTypeError(f"{text!r}: values must be >= 1, got {p}")
        out.append(int(p))
    return out


def non_negative_int_list(text: str) -> list[int]:
    """``0,32768`` -> [0, 32768]; each a whole number >= 0."""
    return [non_negative_int(p) for p in text.split(",")]


def name_list(text: str) -> list[str]:
    out = [p.strip() for p in text.split(",")]
    if not all(out):
        raise argparse.ArgumentTypeError(f"malformed list {text!r}")
    return out


def output_file(text: str) -> str:
    """A path we will write to: checked before any work is done - its folder exists and is writable,
    and it is not a folder itself (a full disk can only show when writing: see :func:`write_output`)."""
    path = Path(text).expanduser()
    parent = path.resolve().parent
    if not parent.is_dir():
        raise argparse.ArgumentTypeError(f"cannot write {text!r}: folder {str(parent)!r} does not exist")
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"cannot write {text!r}: it is a folder")
    if not os.access(path if path.exists() else parent, os.W_OK):
        where = "it" if path.exists() else f"folder {str(parent)!r}"
        raise argparse.ArgumentTypeError(f"cannot write {text!r}: {where} is not writable")
    return text


def write_output(path: str | Path, write: Any) -> None:
    """Run ``write(path)``; an OS error (disk full, permissions changed meanwhile) is one line, exit 1."""
    try:
        write(path)
    except OSError as exc:
        raise RunFailed(f"cannot write {str(path)!r}: {exc.strerror or exc}") from None


def positive_float(text: str) -> float:
    """A finite number > 0 (``inf`` would make work that never ends)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not (value > 0 and math.isfinite(value)):
        raise argparse.ArgumentTypeError(f"must be a finite number > 0, got {text}")
    return value


def non_negative_int(text: str) -> int:
    if not text.strip().isdigit():
        raise argparse.ArgumentTypeError(f"must be a whole number >= 0, got {text!r}")
    return int(text)


def port_number(text: str) -> int:
    if not text.strip().isdigit() or int(text) > 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a TCP port (0-65535; 0 picks a free one)")
    return int(text)


def positive_int(text: str) -> int:
    if not text.strip().lstrip("-").isdigit():
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer")
    if int(text) < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {text}")
    return int(text)


def build_parser() -> _Parser:
    parser = _Parser(prog="wavepp", description="Pipeline-parallel prefill runtime with off-critical-path admission.")
    parser.add_argument("--verbose", action="store_true", help="print the traceback of an error")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    b = sub.add_parser("bench", help="run a workload under policies and concurrencies, side by side")
    b.add_argument("--engine", default="sim", choices=["sim", "torch"], help="execution engine (default: sim)")
    b.add_argument("--model", default=None,
                   help="sim: llama-3-8b, glm-5.2 (default), minimax-m2.7; torch: tiny-llama (default), tiny-moe, "
                        "a config.json or a Hugging Face model directory")
    b.add_argument("--hardware", default=None, help="sim: hardware profile, h200 or b300 (default b300)")
    b.add_argument("--pp", type=positive_int, default=4, help="pipeline stages (default 4)")
    b.add_argument("--workload", default=None,
                   help="cold | reuse90 | mixed | suffix:N | suffix4k (default: suffix4k on sim, reuse90 on torch)")
    b.add_argument("--concurrency", type=int_list, default=[8, 32, 128],
                   help="closed-loop concurrency, e.g. 8,32,128 (trace: the most requests outstanding)")
    b.add_argument("--on-bad-line", choices=["skip", "fail"], default="fail",
                   help="trace: a malformed line ends the bench before it starts (fail) or is skipped and counted")
    b.add_argument("--trace-speed", type=positive_float, default=1.0,
                   help="trace: replay the arrivals this many times faster")
    b.add_argument("--requests", type=positive_int, default=None, help="requests per run (default: max(512, 4 x c))")
    b.add_argument("--policy", type=name_list, default=["wavepp", "trtllm-pp"], help="policies, e.g. wavepp,trtllm-pp")
    b.add_argument("--seed", type=int, default=0)
    b.add_argument("--block-size", type=positive_int, default=64, help="tokens per KV block")
    b.add_argument("--prompt-tokens", type=positive_int, default=None, help="typical prompt length (default: model)")
    b.add_argument("--kv-blocks", type=int_list, default=None,
                   help="KV blocks per stage: one value, or one per stage (uneven capacities)")
    b.add_argument("--gpus-per-stage", type=positive_int, default=None, help="sim: default GPUs per node / pp")
    b.add_argument("--kv-memory-mb", type=positive_float, default=None,
                   help="torch: KV pool per stage when no --kv-blocks")
    b.add_argument("--cost-model", choices=["auto", "table", "analytic", "fitted"], default="auto",
                   help="sim: measured kernel tables (--perf-dir), roofline from profiles, or fitted from a "
                        "calibration (--cost-profile); auto (default): table where the tables cover the model "
                        "and hardware, else analytic")
    b.add_argument("--perf-dir", default=None,
                   help=f"sim: kernel tables folder (default ${PERF_DIR_ENV} or ../shared/data/perf beside the repo)")
    b.add_argument("--cost-profile", default=None, help="sim: a profile written by `wavepp calibrate`")
    b.add_argument("--sim-profile", default=None,
                   help="torch: also run the sim calibrated with this profile and report its throughput error")
    b.add_argument("--max-wave-tokens", type=positive_int, default=None, help="MPU's M")
    b.add_argument("--min-wave-tokens", type=positive_int, default=None, help="MPU's b_min")
    b.add_argument("--ring", type=positive_int, default=None, help="waves in flight R (default 2P, baselines P)")
    b.add_argument("--store", default="memory",
                   help="memory (default) or redis://host:port/db[?cluster=name]: index, plans, knobs, span stream")
    b.add_argument("--reset-store", action="store_true",
                   help="also clear the store's knobs, their history, the span stream and the run descriptions "
                        "(default: kept)")
    b.add_argument("--realtime", action="store_true", help="sim only: run on the wall clock instead of virtual time")
    b.add_argument("--time-scale", type=positive_float, default=None,
                   help="with --realtime: multiply modelled step times (default 1)")
    b.add_argument("--store-deadline", type=positive_float, default=30.0, metavar="SECONDS",
                   help="real time: a store unreachable this long ends the bench (default 30)")
    b.add_argument("--json", dest="json_path", type=output_file, default=None, help="write {\"runs\": [...]} here")
    b.add_argument("--trace", type=output_file, default=None,
                   help="write Chrome trace-event JSON here (one lane per stage)")
    b.add_argument("--save-run", type=output_file, default=None,
                   help="save spans, figures, knobs and status of every run (.gz ok)")
    b.add_argument("--host-scale", type=float, default=None,
                   help="sim: multiply the lockstep host work of a conventional PP loop (sensitivity)")
    b.add_argument("--stall-timeout", type=positive_float, default=60.0,
                   help="end a run that makes no progress this many seconds (of its clock) while work waits")
    b.add_argument("--quiet", action="store_true", help="no progress bar")
    b.add_argument("--launcher", choices=LAUNCHERS, default=None, help=LAUNCHER_HELP)
    cli_telemetry.add_bench_flags(b)
    b.add_argument("--url", default=None,
                   help="drive a running `wavepp serve` at this URL over HTTP instead of an in-process engine")
    b.add_argument("--rate", type=positive_float, default=None,
                   help="with --url: open loop, Poisson arrivals at this many requests/s (default: closed loop)")

    g = sub.add_parser("grid", help="every policy over a declared grid of sim settings; JSON + Markdown summary")
    g.add_argument("--models", type=name_list, default=["glm-5.2", "minimax-m2.7"])
    g.add_argument("--hardware", default="b300")
    g.add_argument("--pp", type=positive_int, default=4)
    g.add_argument("--workloads", type=name_list, default=["cold", "reuse90", "mixed", "suffix4k", "suffix16k"])
    g.add_argument("--concurrency", type=int_list, default=[8, 32, 64, 128])
    g.add_argument("--policy", type=name_list, default=["wavepp", "trtllm-pp", "trtllm-pp-legacy"],
                   help="the first is compared with the best of the others")
    g.add_argument("--requests", type=positive_int, default=None, help="per run (default: max(512, 4 x c))")
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--host-scale", type=float, default=1.0,
                   help="multiply the lockstep host work of a conventional PP loop (sensitivity)")
    g.add_argument("--jobs", type=positive_int, default=1, help="settings run in parallel processes")
    g.add_argument("--perf-dir", default=None, help="the kernel tables (default: ../shared/data/perf)")
    g.add_argument("--json", dest="json_path", type=output_file, default=None)
    g.add_argument("--markdown", type=output_file, default=None)
    g.add_argument("--quiet", action="store_true", help="no progress bar")

    a = sub.add_parser("admission-bench", help="admission latency (lookup + lease + escrow) and store round trips")
    a.add_argument("--store", default="memory", help="memory or redis://host:port/db")
    a.add_argument("--stages", type=positive_int, default=4)
    a.add_argument("--prompt-tokens", type=positive_int, default=131072)
    a.add_argument("--block-size", type=positive_int, default=64)
    a.add_argument("--requests", type=positive_int, default=1000)
    a.add_argument("--seed", type=int, default=0)
    a.add_argument("--json", dest="json_path", type=output_file, default=None)

    d = sub.add_parser("dashboard", help="the live operator dashboard (Streamlit): embedded runtime, a store, or a run")
    src = d.add_mutually_exclusive_group()
    src.add_argument("--store", default=None, help="watch a live deployment on redis://…")
    src.add_argument("--run", default=None, help="open a file saved by `wavepp bench --save-run`")
    d.add_argument("--port", type=positive_int, default=8501)
    d.add_argument("--host", default="127.0.0.1")
    d.add_argument("--engine", choices=["torch", "sim"], default="torch",
                   help="embedded runtime: torch (real compute, tiny model) or sim (slowed to real time)")
    d.add_argument("--model", default=None, help="embedded runtime: tiny-llama (torch) / llama-3-8b (sim) …")
    d.add_argument("--hardware", default="h200", help="embedded sim: hardware profile")
    d.add_argument("--pp", type=positive_int, default=None, help="embedded runtime: stages (torch 2, sim 4)")
    d.add_argument("--workload", default="reuse90", help="embedded runtime: workload")
    d.add_argument("--concurrency", type=positive_int, default=None,
                   help="embedded runtime: closed-loop concurrency (torch 16, sim 64)")
    d.add_argument("--prompt-tokens", type=positive_int, default=None,
                   help="embedded runtime: prompt length (torch 1024, sim 8192)")
    d.add_argument("--policy", default="wavepp", help="embedded runtime: starting policy (a knob)")
    d.add_argument("--time-scale", type=positive_float, default=1.0, help="embedded sim: stretch modelled step times")
    d.add_argument("--cost-profile", default=None,
                   help="the `wavepp calibrate` profile the Knobs page's Preview and Suggest replay a torch run with")

    k = sub.add_parser("knobs", help="show the scheduling knobs in a store, or change them (validated)")
    k.add_argument("--store", required=True, help="redis://host:port/db[?cluster=name]")
    k.add_argument("--set", dest="changes", action="append", default=[], metavar="NAME=VALUE",
                   help="change a knob (repeatable); the runtime applies it at its next wave boundary")
    k.add_argument("--history", type=non_negative_int, default=0, metavar="N", help="also print the last N changes")

    cal = sub.add_parser("calibrate", help="fit the torch engine's stage step times for the simulator")
    cal.add_argument("--engine", choices=["torch"], default="torch")
    cal.add_argument("--model", default="tiny-llama")
    cal.add_argument("--pp", type=positive_int, default=2)
    cal.add_argument("--block-size", type=positive_int, default=64)
    cal.add_argument("--kv-memory-mb", type=positive_float, default=256.0)
    cal.add_argument("--max-wave-tokens", type=positive_int, default=1024,
                     help="largest wave timed (waves of 1-8 chunks up to this many tokens)")
    cal.add_argument("--out", required=True, type=output_file, help="where to write the profile (JSON)")

    e = sub.add_parser("check-engine", help="torch engine vs Hugging Face transformers, same weights")
    e.add_argument("--model", default="tiny-llama", help="tiny-llama, tiny-moe, a config.json or a model directory")
    e.add_argument("--pp", type=positive_int, default=2)
    e.add_argument("--block-size", type=positive_int, default=16)
    e.add_argument("--chunk", type=positive_int, default=64, help="tokens per chunk")
    e.add_argument("--reuse", type=int, default=40, help="tokens shared with an earlier request (may end mid-block)")
    e.add_argument("--seed", type=int, default=0)
    e.add_argument("--launcher", choices=LAUNCHERS, default="threads", help=LAUNCHER_HELP)

    t = sub.add_parser("cost-table", help="sim: analytic vs kernel-table step time of one stage, as Markdown")
    t.add_argument("--model", default="glm-5.2", help="glm-5.2, minimax-m2.7")
    t.add_argument("--hardware", default="b300", help="h200, b300")
    t.add_argument("--pp", type=positive_int, default=4)
    t.add_argument("--stage", type=non_negative_int, default=1, help="which stage (default 1: no embedding or LM head)")
    t.add_argument("--gpus-per-stage", type=positive_int, default=None, help="default GPUs per node / pp")
    t.add_argument("--tokens", type=int_list, default=[1024, 2048, 4096, 8192, 16384], help="new tokens x")
    t.add_argument("--context", type=non_negative_int_list, default=[0, 32768, 131072], help="cached tokens L")
    t.add_argument("--perf-dir", default=None,
                   help=f"kernel tables folder (default ${PERF_DIR_ENV} or ../shared/data/perf)")

    for name, text in (("preview", "replay a saved run's arrivals in the sim under its knobs and changed ones"),
                       ("suggest", "search wave budget, its floor and the ring in the sim on a saved run's arrivals")):
        w = sub.add_parser(name, help=text)
        w.add_argument("runfile", help="a file saved by `wavepp bench --save-run`")
        w.add_argument("--run-id", default=None, help="which run of the file (default: the first)")
        if name == "preview":
            w.add_argument("--set", dest="changes", action="append", default=[], metavar="NAME=VALUE",
                           help="a proposed knob value (repeatable)")
        else:
            w.add_argument("--goal", choices=["throughput", "latency"], default="throughput",
                           help="highest input throughput, or lowest p95 prefill latency above --floor")
            w.add_argument("--floor", type=positive_float, default=None, metavar="TOKENS_PER_S",
                           help="latency goal: the least input throughput (default: the current knobs' predicted)")
        w.add_argument("--cost-profile", default=None,
                       help="the `wavepp calibrate` profile a torch run is replayed with (a sim run: its own model)")
        w.add_argument("--window", type=positive_float, default=None, metavar="SECONDS",
                       help="replay the arrivals of the run's last SECONDS (default: the whole run)")
        w.add_argument("--time-limit", type=positive_float, default=60.0, metavar="SECONDS",
                       help="stop the replays after this long (default 60)")
        w.add_argument("--json", dest="json_path", type=output_file, default=None)

    c = sub.add_parser("calibrate-coordination", help="measure admission/cache costs on this machine's CPU")
    c.add_argument("--redis", default=None, help="also measure one round trip to this Redis URL")
    c.add_argument("--json", dest="json_path", type=output_file, default=None)
    cli_telemetry.add_trace_parser(sub, output_file)
    from wavepp.runtime.serve.config import add_arguments as add_serve_arguments
    srv = sub.add_parser("serve", help="the runtime as an HTTP server: /v1/prefill, /v1/completions, knobs, state")
    add_serve_arguments(srv)
    stk = sub.add_parser("stack", help="redis-server, wavepp serve and the dashboard as processes on loopback")
    add_serve_arguments(stk)
    stk.add_argument("--dashboard-port", type=port_number, default=8501, help="the dashboard's port (0: a free one)")
    stk.add_argument("--redis-port", type=port_number, default=0,
                     help="the private redis-server's port (0: a free one)")
    stk.add_argument("--cluster", default="wavepp", help="the store's cluster name")

    for command in sub.choices.values():      # `wavepp bench … --verbose` as well as `wavepp --verbose bench …`
        command.add_argument("--verbose", action="store_true", default=argparse.SUPPRESS,
                             help="print the traceback of an error")
    return parser


#: bench flags that mean something on one engine only: given for the other, they are refused
SIM_ONLY = {"hardware": "--hardware", "gpus_per_stage": "--gpus-per-stage", "cost_profile": "--cost-profile",
            "perf_dir": "--perf-dir", "host_scale": "--host-scale", "time_scale": "--time-scale"}
TORCH_ONLY = {"kv_memory_mb": "--kv-memory-mb", "launcher": "--launcher", "sim_profile": "--sim-profile"}


def refuse_flags_of_other_engine(args: argparse.Namespace) -> None:
    """A flag that would do nothing on the chosen engine is an error, not silently ignored."""
    other = SIM_ONLY if args.engine == "torch" else TORCH_ONLY
    given = [flag for dest, flag in other.items() if getattr(args, dest) is not None]
    if args.engine == "torch" and args.realtime:
        given.append("--realtime")
    if args.engine == "torch" and args.cost_model != "auto":
        given.append("--cost-model")
    if given:
        what = "the torch engine runs real compute" if args.engine == "torch" else "the sim has no torch stages"
        raise ValueError(f"{', '.join(given)}: only for --engine {'sim' if args.engine == 'torch' else 'torch'} "
                         f"({what})")


#: bench flags that mean something with --url (the server's own settings decide the rest)
URL_FLAGS = {"url", "rate", "workload", "concurrency", "requests", "prompt_tokens", "seed", "json_path", "quiet",
             "trace_speed", "on_bad_line", "verbose", "command"}


def cmd_bench(args: argparse.Namespace) -> int:
    if args.url is not None:
        return cmd_bench_url(args)
    if args.rate is not None:
        raise UsageError("--rate: only with --url (an in-process bench is closed loop, or a trace's own arrivals)")
    from wavepp.runtime.engines.sim.engine import SimEngine
    from wavepp.runtime.knobs import KnobError, check_block_size
    from wavepp.runtime.policies import get_policy
    from wavepp.runtime.traces import load_trace
    from wavepp.runtime.workloads import fit_prompt_tokens, parse_workload
    from wavepp.store.base import StoreError

    engine: Any = None
    try:
        try:
            if args.time_scale is not None and not args.realtime:
                raise ValueError("--time-scale stretches the wall clock of a real-time run: it needs --realtime")
            spec = parse_workload(args.workload or ("reuse90" if args.engine == "torch" else "suffix4k"))
            if spec.kind == "trace":
                spec = dataclasses.replace(spec, on_bad_line=args.on_bad_line, speed=args.trace_speed)
                trace = load_trace(spec.path, spec.on_bad_line, args.requests)    # every line checked up front
                if trace.skipped:
                    print(f"wavepp: warning: skipped {trace.skipped} malformed line(s) of the trace, "
                          f"first: {trace.first_skip}", file=sys.stderr)
            for p in args.policy:
                get_policy(p)
            refuse_flags_of_other_engine(args)
            cli_telemetry.apply(args)
            if args.engine == "torch":
                from wavepp.runtime.engines.torch.engine import TorchEngine
                args.model = args.model or "tiny-llama"
                engine = TorchEngine(args.model, args.pp, args.block_size, args.kv_blocks, args.kv_memory_mb or 256.0,
                                     args.seed, store_url=args.store, launcher=args.launcher or "threads")
                args.hardware = engine.device.type       # a torch run reports its device, no hardware profile
            else:
                if (args.cost_model == "fitted") != (args.cost_profile is not None):
                    raise ValueError("--cost-model fitted and --cost-profile FILE go together")
                args.model = args.model or ("tiny-llama" if args.cost_profile else "glm-5.2")
                args.hardware = args.hardware or "b300"
                engine = SimEngine(args.model, args.hardware, args.pp, args.block_size, args.kv_blocks,
                                   args.gpus_per_stage, store_url=args.store, realtime=args.realtime,
                                   time_scale=args.time_scale or 1.0, cost_profile=args.cost_profile,
                                   cost_model="auto" if args.cost_profile else args.cost_model,
                                   perf_dir=args.perf_dir,
                                   host_work_scale=1.0 if args.host_scale is None else args.host_scale)
            sim = None
            if args.sim_profile:
                if args.engine != "torch":
                    raise ValueError("--sim-profile compares the torch engine with its calibrated sim: "
                                     "use --engine torch")
                sim = SimEngine(args.model, args.hardware, args.pp, args.block_size, args.kv_blocks,
                                cost_profile=args.sim_profile)
            changes = {k: v for k, v in (("max_wave_tokens", args.max_wave_tokens),
                                         ("min_wave_tokens", args.min_wave_tokens),
                                         ("ring", args.ring)) if v is not None}
            knobs = check_block_size(engine.default_knobs().replace(**changes), args.block_size)
            if args.prompt_tokens is not None and args.prompt_tokens < 2 * args.block_size:
                raise ValueError(f"--prompt-tokens must be at least 2 blocks ({2 * args.block_size})")
            if spec.kind != "trace":             # a trace's prompts are its own (longer ones fail at arrival)
                args.prompt_tokens = fit_prompt_tokens(spec, args.prompt_tokens, engine.default_prompt_tokens(),
                                                       engine.max_context, args.block_size)
        except (ValueError, KnobError, StoreError) as exc:
            raise UsageError(str(exc)) from None
        return _bench(args, spec, engine, sim, knobs)
    except KeyboardInterrupt:
        if engine is not None:
            engine.close(orderly=False)
        raise
    finally:
        if engine is not None:
            engine.close()


def cmd_bench_url(args: argparse.Namespace) -> int:
    """``wavepp bench --url``: the load generator against a running server, one run per concurrency."""
    import asyncio

    from wavepp.runtime.progress import BenchProgress, print_table
    from wavepp.runtime.report import fmt
    from wavepp.runtime.serve.loadgen import LoadError, LoadGenerator, UrlRun
    from wavepp.runtime.traces import TraceError, load_trace
    from wavepp.runtime.workloads import parse_workload

    defaults = build_parser().parse_args(["bench"])
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
    except (ValueError, TraceError) as exc:
        raise UsageError(str(exc)) from None
    requests = args.requests if spec.kind == "trace" else args.requests or max(512, 4 * max(args.concurrency))
    runs: list[UrlRun] = []
    failure: BaseException | None = None
    with BenchProgress(disabled=args.quiet) as progress:
        try:
            for c in args.concurrency:
                gen = LoadGenerator(args.url, spec, requests, c, args.rate, args.prompt_tokens, args.seed)
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
            print(f"clients {r.figures.policy} {r.figures.concurrency}: {c['answered']}/{c['sent']} answered, "
                  f"{c['refused_429']} refused (429), {c['failed']} failed; "
                  f"{fmt(c['input_tokens_per_s'], ',.0f')} input tok/s; latency p50/p95/p99 {latency} s; "
                  f"HTTP overhead p50 {fmt(c['http_overhead_p50_s'], '.2f', 1e3)} ms")
    if args.json_path and runs:
        write_output(args.json_path, lambda p: Path(p).write_text(json.dumps({"runs": [r.as_dict() for r in runs]},
                                                                             indent=1)))
        print(f"wrote {args.json_path}")
    if failure is not None:
        raise failure
    failed = [r for r in runs if r.client.failed]
    if failed:
        count = sum(r.client.failed for r in failed)
        raise RunFailed(f"{count} request(s) failed, e.g. {failed[0].client.first_error}")
    return 0


def _bench(args: argparse.Namespace, spec: Any, engine: Any, sim: Any, knobs: Any) -> int:
    """Run every (concurrency, policy) pair; the outputs of the runs that finished are written even
    when a later one fails, then the failure is raised."""
    from wavepp.runtime.bench import BenchConfig, RunRecord, iter_bench, prepare_store, run_bench
    from wavepp.runtime.progress import BenchProgress, print_table
    from wavepp.runtime.report import fmt
    from wavepp.runtime.watchdog import Stalled
    from wavepp.store.base import StoreError
    requests = args.requests if spec.kind == "trace" else args.requests or max(512, 4 * max(args.concurrency))
    cfg = BenchConfig(spec, args.concurrency, args.policy, requests, args.seed, args.prompt_tokens, knobs,
                      args.model, args.hardware, args.stall_timeout, args.store_deadline, args.telemetry)
    if args.engine == "sim" and not args.quiet:
        print(f"sim cost model: {engine.cost_model_name}")
    try:
        cleared = prepare_store(engine.store_url, args.reset_store)   # unreachable, not Redis: before any run
    except StoreError as exc:
        raise UsageError(str(exc)) from None
    if cleared:
        print(cleared)
    records: list[RunRecord] = []
    failure: BaseException | None = None
    with BenchProgress(disabled=args.quiet) as progress:
        try:
            for record in iter_bench(engine, cfg, progress.update):
                records.append(record)
        except StoreError as exc:          # the store went away mid-run and did not come back in time
            failure = RunFailed(f"store: {exc}")
        except Stalled as exc:             # the deadlock guard: a failure of the run, not of the input
            failure = RunFailed(str(exc))
        except (Exception, KeyboardInterrupt) as exc:
            failure = exc
    if records:
        print_table([r.figures for r in records])
        cli_telemetry.print_cost(records)
    if sim is not None and failure is None:
        for r, s_ in zip(records, run_bench(sim, cfg), strict=True):
            measured, modelled = r.figures.input_tokens_per_s, s_.figures.input_tokens_per_s
            err = modelled / measured - 1 if measured and modelled is not None else None
            r.meta["sim_input_tokens_per_s"] = modelled
            r.meta["sim_throughput_error"] = err
            print(f"calibrated sim vs torch, {r.label}: {fmt(modelled, ',.0f')} vs {fmt(measured, ',.0f')} "
                  f"input tok/s ({fmt(err, '+.1%')}); efficiency {fmt(s_.figures.pipeline_efficiency, '.3f')} "
                  f"vs {fmt(r.figures.pipeline_efficiency, '.3f')}")
    _write_outputs(args, records)
    if failure is not None:
        raise failure
    failed = sum(r.figures.failed for r in records)
    if not failed:
        return 0
    first = next(iter(next(r for r in records if r.loop.failures).loop.failures.values()))
    dead = [r.label for r in records if r.figures.completed == 0]
    if dead:
        raise RunFailed(f"every request failed in {', '.join(dead)} ({failed} in all), e.g.: {first}")
    print(f"warning: {failed} request(s) failed, e.g.: {first}", file=sys.stderr)
    return 0


def _write_outputs(args: argparse.Namespace, records: Sequence[Any]) -> None:
    """``--json``, ``--save-run`` and ``--trace`` of the runs that finished."""
    if not records:
        return
    if args.json_path:
        runs = [{**r.figures.as_dict(), **{k: v for k, v in r.meta.items() if k.startswith(("sim_", "spans"))},
                 "telemetry": r.meta["telemetry"],
                 "knobs": r.meta["knobs"], "knob_changes": [c for _, c in r.loop.knob_changes]} for r in records]
        write_output(args.json_path, lambda p: Path(p).write_text(json.dumps({"runs": runs}, indent=1)))
        print(f"wrote {args.json_path}")
    if args.save_run:
        from wavepp.runtime.runfile import save_runs
        write_output(args.save_run, lambda p: save_runs(p, [r.saved() for r in records]))
        print(f"wrote {args.save_run} (wavepp dashboard --run {args.save_run})")
    if args.trace:
        from wavepp.telemetry.chrome_trace import write_trace
        write_output(args.trace, lambda p: write_trace(p, ((r.label, r.encoded, args.pp) for r in records)))
        print(f"wrote {args.trace} (open in https://ui.perfetto.dev)")


def cmd_grid(args: argparse.Namespace) -> int:
    from wavepp.runtime.engines.sim.engine import SimEngine
    from wavepp.runtime.grid import GridSpec, run_grid, summary, to_markdown
    from wavepp.runtime.policies import get_policy
    from wavepp.runtime.progress import BenchProgress
    from wavepp.runtime.workloads import parse_workload

    spec = GridSpec(args.models, args.hardware, args.pp, args.workloads, args.concurrency, args.policy,
                    args.requests, args.seed, args.perf_dir, args.host_scale)
    try:                                   # every value checked before the first run
        for p in spec.policies:
            get_policy(p)
        for w in spec.workloads:
            parse_workload(w)
        for m in spec.models:
            SimEngine(m, spec.hardware, spec.pp, perf_dir=spec.perf_dir, host_work_scale=spec.host_scale)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    with BenchProgress(disabled=args.quiet) as progress:
        rows = run_grid(spec, args.jobs, lambda done, total: progress.update("grid settings", done, total))
    print(summary(rows))
    if args.json_path:
        data = json.dumps({"summary": summary(rows), "settings": [r.as_dict() for r in rows]}, indent=1)
        write_output(args.json_path, lambda p: Path(p).write_text(data))
        print(f"wrote {args.json_path}")
    if args.markdown:
        write_output(args.markdown, lambda p: Path(p).write_text(to_markdown(rows, spec)))
        print(f"wrote {args.markdown}")
    return 0


def cmd_admission_bench(args: argparse.Namespace) -> int:
    import asyncio

    from wavepp.runtime.admission_bench import admission_bench
    from wavepp.store.base import StoreError
    if args.prompt_tokens < 2 * args.block_size:
        raise UsageError(f"--prompt-tokens must be at least 2 blocks ({2 * args.block_size})")
    try:
        result = asyncio.run(admission_bench(args.store, args.stages, args.prompt_tokens, args.block_size,
                                             args.requests, args.seed))
    except (StoreError, ValueError) as exc:
        raise UsageError(str(exc)) from None
    r = result.as_dict()
    print(f"store={r['store']} stages={r['stages']} prompt={r['prompt_tokens']} tokens block={r['block_size']} "
          f"requests={r['requests']}")
    print(f"admission latency p50 {r['latency_p50_s'] * 1e3:.4f} ms  p99 {r['latency_p99_s'] * 1e3:.4f} ms  "
          f"(hashing p50 {r['hashing_p50_s'] * 1e3:.3f} ms, reused {r['reused_blocks_mean']:.0f} blocks, "
          f"{r['round_trips_per_request']:.2f} store round trips per request)")
    if args.json_path:
        keys = ("store", "stages", "prompt_tokens", "requests", "latency_p50_s", "latency_p99_s", "hashing_p50_s",
                "round_trips_per_request")
        write_output(args.json_path, lambda p: Path(p).write_text(json.dumps({k: r[k] for k in keys}, indent=1)))
    return 0


def cmd_knobs(args: argparse.Namespace) -> int:
    import asyncio

    from wavepp.runtime.knobs import KnobError, Knobs, parse_texts, validated_values
    from wavepp.store.base import KnobsRecord, StoreError
    from wavepp.store.open import open_store
    from wavepp.store.urls import parse_store_url

    raw = {}
    for item in args.changes:
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise UsageError(f"--set takes NAME=VALUE, got {item!r}")
        raw[name.strip()] = value
    changes, problems = parse_texts(raw)          # each value by its knob's type: `8_192` is no integer

    async def run() -> tuple[KnobsRecord, list[dict[str, object]]]:
        store = await open_store(args.store)
        try:
            record = await store.knobs_set(changes, validate=validated_values) if changes else await store.knobs_get()
            return record, await store.knobs_history(args.history)
        finally:
            await store.close()

    try:
        if parse_store_url(args.store).kind == "memory":
            raise UsageError("knobs live in a shared store: give --store redis://…")
        if problems:
            raise KnobError(problems)
        record, history = asyncio.run(run())
    except (KnobError, StoreError) as exc:
        raise UsageError(str(exc)) from None
    if record.note:
        print(f"wavepp: warning: {record.note}", file=sys.stderr)
    print(f"knobs version {record.version}")
    if record.deployment is not None:
        print(f"  (checked against the running deployment: block size {record.deployment.block_size}, "
              f"{record.deployment.num_stages} stages)")
    for name, value in record.values_or(Knobs().as_dict()).items():
        print(f"  {name:22s} {value}")
    for h in history:
        print(f"  v{h['version']}: {h['changes']}")
    return 0


def cmd_dashboard(args: argparse.Namespace) -> int:
    import os

    from wavepp.store.base import StoreError
    if args.cost_profile:
        from wavepp.runtime.engines.calibrate import load_profile
        try:
            load_profile(args.cost_profile)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
        os.environ["WAVEPP_COST_PROFILE"] = os.path.abspath(args.cost_profile)   # dashboard.screens.whatif
    if args.run:
        from wavepp.runtime.runfile import load_runs
        try:
            load_runs(args.run)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
        source = f"run:{os.path.abspath(args.run)}"
    elif args.store:
        import asyncio
        try:
            asyncio.run(_check_store(args.store))
        except StoreError as exc:
            raise UsageError(str(exc)) from None
        source = f"store:{args.store}"
    else:
        source = "embedded"
        _start_embedded(args)
    os.environ["WAVEPP_DASHBOARD"] = source
    from streamlit.web import bootstrap

    import wavepp.dashboard
    app = os.path.join(os.path.dirname(wavepp.dashboard.__file__), "app.py")
    from wavepp.store.urls import redact
    print(f"WavePP dashboard ({redact(source)}): http://{args.host}:{args.port}  (Ctrl-C to stop)", flush=True)
    flags = {"server_port": args.port, "server_address": args.host, "server_headless": True,
             "browser_gatherUsageStats": False, "server_fileWatcherType": "none", "global_developmentMode": False,
             "server_runOnSave": False,
             "client_toolbarMode": "viewer",      # an operator's view: no Deploy button, no developer menu
             # Streamlit runs a full gc.collect(2) after every script run, the watcher's included: over
             # the ~10 containers per span a 100k-span run keeps, that alone was ~0.3 s of CPU per second.
             "runner_postScriptGC": False}
    bootstrap.load_config_options(flag_options=flags)
    bootstrap.run(app, False, [], flags)
    return 0


async def _check_store(url: str) -> None:
    from wavepp.store.open import open_store
    from wavepp.store.urls import parse_store_url
    if parse_store_url(url).kind != "redis":
        from wavepp.store.base import StoreError
        raise StoreError("a live dashboard reads a shared store: give --store redis://…")
    store = await open_store(url)
    await store.close()


def _start_embedded(args: argparse.Namespace) -> None:
    """The runtime (torch engine, or the sim slowed to real time) in a child process serving the dashboard."""
    from wavepp.dashboard import embedded
    from wavepp.runtime.knobs import KnobError
    from wavepp.runtime.workloads import parse_workload
    torch_engine = args.engine == "torch"
    if torch_engine:
        engine_args = {"kind": "torch", "model": args.model or "tiny-llama", "pp": args.pp or 2}
    else:
        engine_args = {"kind": "sim", "model": args.model or "llama-3-8b", "hardware": args.hardware,
                       "pp": args.pp or 4, "realtime": True, "time_scale": args.time_scale}
    try:
        parse_workload(args.workload)
        engine = embedded.make_engine(engine_args)            # validate here: one line, exit 2
        knobs = engine.default_knobs().replace(policy=args.policy)
    except (ValueError, KnobError) as exc:
        raise UsageError(str(exc)) from None
    prompt = args.prompt_tokens or (engine.default_prompt_tokens() if torch_engine else 8192)
    runtime_args = {"workload": args.workload, "concurrency": args.concurrency or (16 if torch_engine else 64),
                    "prompt_tokens": prompt, "knobs": knobs}
    remote, _proc = embedded.start_child(engine_args, runtime_args)
    embedded.CURRENT = remote
    if remote.error:
        raise UsageError(remote.error)


def _whatif_inputs(args: argparse.Namespace) -> tuple[Any, Any, Any, Any]:
    """(replay, sim, current knobs, the run's own figures over the replayed arrivals) of the saved run
    ``args`` names; UsageError says what is wrong."""
    from wavepp.runtime import whatif
    from wavepp.runtime.runfile import load_runs
    try:
        runs = load_runs(args.runfile)
        run = next((r for r in runs if r.id == args.run_id), None) if args.run_id else (runs[0] if runs else None)
        if run is None:
            raise ValueError(f"no run {args.run_id!r} in {args.runfile} (runs: {', '.join(r.id for r in runs)})")
        spec = whatif.sim_spec(run.meta, args.cost_profile)
        replay = whatif.replay_of(run.spans, run.meta, args.window)
        whatif.check_replay(replay)
        observed = whatif.observed_over(run.spans, replay, spec.pp)
        return replay, spec, whatif.knobs_at_end(run.meta, run.knob_changes), observed
    except ValueError as exc:
        raise UsageError(str(exc)) from None


T = TypeVar("T")


def _run_whatif(replays: Callable[[Any], T]) -> T:
    """Run ``replays(progress)`` with a progress line on a terminal (rewritten in place, ended
    here); past its time limit the command fails (exit 1), a replay that cannot run is bad input."""
    from wavepp.runtime import whatif
    progress = None
    if sys.stderr.isatty():
        progress = lambda fraction, label: print(f"\r{fraction:5.0%} {label:24s}", end="",  # noqa: E731
                                                 file=sys.stderr, flush=True)
    try:
        return replays(progress)
    except whatif.TimeLimit as exc:
        raise RunFailed(str(exc)) from None
    except whatif.WhatIfError as exc:
        raise UsageError(str(exc)) from None
    finally:
        if progress is not None:
            print(file=sys.stderr)


def _print_whatif(rows: Any, proposed: str, replay_line: str, json_path: str | None, data: Any) -> None:
    """The side-by-side table, the replay check line, and the JSON when asked for."""
    from wavepp.runtime.whatif_report import table
    print(table(rows, ("figure", "current", proposed, "change")))
    print(replay_line)
    if json_path:
        text = json.dumps(data, indent=1)
        write_output(json_path, lambda p: Path(p).write_text(text))


def cmd_preview(args: argparse.Namespace) -> int:
    from wavepp.runtime import whatif
    from wavepp.runtime.knobs import Deployment, KnobError, from_changes, parse_texts
    from wavepp.runtime.whatif_report import compare_rows, preview_dict, replay_check, spread_line
    replay, spec, current, observed = _whatif_inputs(args)
    raw = {}
    for item in args.changes:
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise UsageError(f"--set takes NAME=VALUE, got {item!r}")
        raw[name.strip()] = value
    if not raw:
        raise UsageError("give the proposed knobs with --set NAME=VALUE (e.g. --set ring=8)")
    changes, problems = parse_texts(raw)
    try:
        if problems:
            raise KnobError(problems)
        proposed = from_changes(current.as_dict(), changes, Deployment(spec.block_size, spec.pp))
    except KnobError as exc:
        raise UsageError(str(exc)) from None
    result = _run_whatif(lambda progress: whatif.preview(replay, spec, current, proposed, args.time_limit,
                                                          progress))
    print(f"preview: {', '.join(f'{k}={v}' for k, v in result.changes.items()) or 'no knob changed'}; "
          f"replayed {result.replay_note} in the {result.sim}")
    check = "\n".join(line for line in (replay_check(result.current, observed), spread_line(result)) if line)
    _print_whatif(compare_rows(result.current.figures, result.proposed.figures), "proposed", check,
                  args.json_path, preview_dict(result))
    return 0


def cmd_suggest(args: argparse.Namespace) -> int:
    from wavepp.runtime.whatif_report import compare_rows, replay_check, suggestion_dict, suggestion_line
    from wavepp.runtime.whatif_suggest import Goal, suggest
    replay, spec, current, observed = _whatif_inputs(args)
    result = _run_whatif(lambda progress: suggest(replay, spec, current, Goal(args.goal, args.floor),
                                                  args.time_limit, progress))
    print(suggestion_line(result))
    print(f"(replayed {result.replay_note} in the {result.sim}; nothing was applied)")
    _print_whatif(compare_rows(result.current.figures, result.best.figures), "suggested",
                  replay_check(result.current, observed), args.json_path, suggestion_dict(result))
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    from wavepp.runtime.knobs import KnobError
    from wavepp.runtime.serve.config import resolve
    from wavepp.runtime.serve.main import run_server
    from wavepp.store.base import StoreError
    try:
        settings = resolve(vars(args))
        return run_server(settings)
    except (ValueError, KnobError) as exc:
        raise UsageError(str(exc)) from None
    except StoreError as exc:
        raise RunFailed(f"store: {exc}") from None


def cmd_stack(args: argparse.Namespace) -> int:
    from wavepp.runtime.serve.stack import StackError, run_stack
    try:
        return run_stack(vars(args), args.dashboard_port, args.redis_port, args.cluster)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    except StackError as exc:
        raise RunFailed(str(exc)) from None


def cmd_calibrate(args: argparse.Namespace) -> int:
    from wavepp.runtime.engines.calibrate import calibrate, fit_error, save_profile
    from wavepp.runtime.engines.torch.engine import TorchEngine
    try:
        with TorchEngine(args.model, args.pp, args.block_size, kv_memory_mb=args.kv_memory_mb) as engine:
            profile = calibrate(engine, max_wave_tokens=args.max_wave_tokens)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    write_output(args.out, lambda p: save_profile(p, profile))
    for s, (f, (med, worst)) in enumerate(zip(profile["stages"], fit_error(profile), strict=True)):
        print(f"stage {s}: t = {f['c'] * 1e3:.3f} ms/wave + {f['c_chunk'] * 1e3:.3f} ms/chunk + "
              f"{f['gamma'] * 1e6:.3f} us*L + {f['beta'] * 1e6:.2f} us*x + {f['alpha_lx'] * 1e9:.3f} ns*Lx + "
              f"{f['alpha_xx'] * 1e9:.3f} ns*x^2  "
              f"(fit error over {len(profile['samples'][s])} waves: median {med:.1%}, max {worst:.1%})")
    print(f"wrote {args.out} (use: wavepp bench --engine sim --cost-model fitted --cost-profile {args.out})")
    return 0


def cmd_check_engine(args: argparse.Namespace) -> int:
    from wavepp.runtime.engines.torch.check import run_check
    if args.reuse < 0:
        raise UsageError(f"--reuse must be >= 0, got {args.reuse}")
    try:
        r = run_check(args.model, args.pp, args.block_size, args.chunk, args.reuse, args.seed,
                      launcher=args.launcher)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    print(f"max relative error: logits {r.max_rel_err_logits:.3e}, stored K/V {r.max_rel_err_kv:.3e} "
          f"(tolerance {r.tol:.0e}) -> {'OK' if r.ok else 'MISMATCH'}")
    if r.non_finite is not None:
        raise RunFailed(f"check-engine: NaN or infinity in the {r.non_finite}")
    return 0 if r.ok else 1


def cmd_cost_table(args: argparse.Namespace) -> int:
    from wavepp.runtime.engines.sim.cost_compare import compare_step_times, markdown
    try:
        rows = compare_step_times(args.model, args.hardware, args.pp, args.stage, args.tokens, args.context,
                                  args.gpus_per_stage, args.perf_dir)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    print(f"{args.model} on {args.hardware}, PP{args.pp}, stage {args.stage}: one chunk of x new tokens after L cached")
    print(markdown(rows))
    return 0


def cmd_calibrate_coordination(args: argparse.Namespace) -> int:
    from wavepp.runtime.engines.coordination import measure
    from wavepp.store.base import StoreError
    try:
        costs = measure(redis_url=args.redis).as_dict()
    except StoreError as exc:
        raise UsageError(str(exc)) from None
    for k, v in costs.items():
        print(f"{k:34s} {v * 1e6:9.3f} us")
    if args.json_path:
        write_output(args.json_path, lambda p: Path(p).write_text(json.dumps(costs, indent=1)))
    return 0


def cmd_trace(args: argparse.Namespace) -> int:
    try:
        return cli_telemetry.cmd_trace(args, write_output)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def main(argv: Sequence[str] | None = None) -> int:
    """Every error ends in one line on stderr (``wavepp: error: …``): exit 2 for bad input, 1 for a
    failure during the run, 130/143 for SIGINT/SIGTERM; the traceback only with ``--verbose``."""
    parser = build_parser()
    verbose = False
    interrupts = _Interrupts()
    try:
        args = parser.parse_args(argv)
        verbose = args.verbose
        if getattr(args, "launcher", None) == "torchrun" and serve_if_worker():
            return 0
        handler = {"bench": cmd_bench, "grid": cmd_grid, "admission-bench": cmd_admission_bench, "knobs": cmd_knobs,
                   "dashboard": cmd_dashboard, "check-engine": cmd_check_engine, "calibrate": cmd_calibrate,
                   "calibrate-coordination": cmd_calibrate_coordination, "cost-table": cmd_cost_table,
                   "trace": cmd_trace, "preview": cmd_preview, "suggest": cmd_suggest,
                   "serve": cmd_serve, "stack": cmd_stack}[args.command]
        with interrupts:
            return handler(args)
    except UsageError as exc:
        return _error(str(exc), EXIT_USAGE, verbose)
    except RunFailed as exc:
        return _error(str(exc), EXIT_FAILED, verbose)
    except KeyboardInterrupt:
        if verbose:
            traceback.print_exc()
        print(f"wavepp: interrupted ({interrupts.name})", file=sys.stderr)
        return 128 + signal.Signals[interrupts.name].value
    except Exception as exc:
        first = (str(exc).strip().splitlines() or [""])[0]
        return _error(f"{type(exc).__name__}: {first}" if first else type(exc).__name__, EXIT_FAILED, verbose)


def _error(message: str, code: int, verbose: bool) -> int:
    if verbose:
        traceback.print_exc()
    print(f"wavepp: error: {message}", file=sys.stderr)
    return code


class _Interrupts:
    """SIGTERM stops the command the way Ctrl-C does - inside an asyncio run, through asyncio's own
    SIGINT handler (the main task is cancelled and every task unwinds; raising from the handler
    would strike whichever task runs and leave "Task exception was never retrieved"), else as a
    KeyboardInterrupt - so ``finally`` blocks run and stage processes are stopped. Remembers which
    signal came, for the message and the exit code."""

    def __init__(self) -> None:
        self.name = "SIGINT"
        self._previous: Any = None

    def __enter__(self) -> _Interrupts:
        try:
            self._previous = signal.signal(signal.SIGTERM, self._on_sigterm)
        except ValueError:                # not the main thread (an embedding): leave signals alone
            pass
        return self

    def __exit__(self, *exc: object) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGTERM, self._previous)

    def _on_sigterm(self, signum: int, frame: Any) -> None:
        self.name = "SIGTERM"
        on_sigint = signal.getsignal(signal.SIGINT)
        if callable(on_sigint) and on_sigint is not signal.default_int_handler:
            on_sigint(signal.SIGINT, frame)
        else:
            raise KeyboardInterrupt


def serve_if_worker() -> bool:
    """Under torchrun every rank runs this command: ranks 1..P-1 serve their stage until rank 0 ends."""
    from wavepp.runtime.engines.torch.dist.launch import torchrun_rank
    ranks = torchrun_rank()
    if ranks is None:
        raise UsageError("--launcher torchrun: start the command with torchrun (RANK/WORLD_SIZE are not set)")
    rank, size = ranks
    if rank == 0:
        return False
    import torch

    from wavepp.runtime.engines.torch.dist.stage_server import serve_stage
    serve_stage(rank, size, "env://", torch.cuda.is_available())
    return True


if __name__ == "__main__":
    sys.exit(main())
