"""What telemetry costs: throughput with every span exported over OTLP to a local receiver
vs ``--telemetry off``, side by side in one bench per engine (the torch engine, the real-time sim);
the cost of one span per configuration; the memory of 100k spans held in the dashboard's ring.

    .venv/bin/python scripts/telemetry_cost.py [--repeats R] [--json out/telemetry-cost.json]

Starts an OTLP/HTTP receiver on 127.0.0.1:4318 (``telemetry.receiver``) and runs ``wavepp bench
--telemetry off,on,otlp`` (rotated from one repeat to the next): ``on`` has no exporter here
(memory store, no endpoint), so off vs on is the noise floor of the machine, off vs otlp the cost
of exporting every span.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

from wavepp.telemetry import names as N
from wavepp.telemetry.config import TelemetryConfig
from wavepp.telemetry.feed import SpanFeed
from wavepp.telemetry.receiver import OtlpReceiver
from wavepp.telemetry.ring import SpanRing
from wavepp.telemetry.setup import Telemetry

WAVEPP = str(Path(sys.executable).parent / "wavepp")
BENCHES = {
    "torch": ["--engine", "torch", "--model", "tiny-llama", "--pp", "2", "--workload", "reuse90",
              "--concurrency", "16", "--policy", "wavepp"],
    "sim-realtime": ["--engine", "sim", "--model", "llama-3-8b", "--hardware", "h200", "--pp", "4", "--realtime",
                     "--workload", "reuse90", "--prompt-tokens", "4096", "--concurrency", "32", "--policy", "wavepp"],
}


def per_span_cost(n: int = 50_000) -> dict[str, dict[str, float]]:
    """Per span (start, three attributes, end), per configuration, in microseconds of CPU time: on
    the thread that ends spans (what the runtime's loop pays) and in the whole process (with the
    export thread's encoding and HTTP). CPU time, unlike the wall clock, does not count the time
    other work on a shared machine holds the cores."""
    receiver = OtlpReceiver()
    # (settings, the span list kept): every configuration feeds the figures, as a bench does. "figures":
    # nothing else reads the spans (telemetry.feed_tracer's spans); "saved": the run's span list too
    # (--save-run, the SDK's spans); "otlp": exported as well.
    configs = {"figures": (TelemetryConfig(mode="off"), False), "saved": (TelemetryConfig(mode="off"), True),
               "otlp": (TelemetryConfig(mode="otlp", otlp_endpoint=receiver.endpoint), False)}
    out = {}
    for name, (cfg, keep) in configs.items():
        tel = Telemetry(time.monotonic, None, config=cfg, keep=keep, feed=SpanFeed(lambda spans: None))
        for _ in range(1000):                      # warm-up
            with tel.span(N.EXECUTE, {N.STAGE: 0, N.WAVE_ID: 1, N.TOKENS: 512}):
                pass
        tel.provider.force_flush()
        thread0, process0 = time.thread_time(), time.process_time()
        for i in range(n):
            with tel.span(N.EXECUTE, {N.STAGE: i % 4, N.WAVE_ID: i, N.TOKENS: 512}):
                pass
        thread = time.thread_time() - thread0
        tel.provider.force_flush()                 # the export thread's share is done too
        process = time.process_time() - process0
        out[name] = {"loop_thread_us": thread / n * 1e6, "process_us": process / n * 1e6}
        tel.shutdown()
    receiver.close()
    return out


def ring_memory(n: int = 100_000) -> float:
    """MB that ``n`` typical spans (a mix of stage steps, plans and requests) take in the ring."""
    tel = Telemetry(time.monotonic, None, config=TelemetryConfig(mode="off"))
    spans = []
    for i in range(n // 10):
        for stage in range(3):
            with tel.span(N.EXECUTE, {N.STAGE: stage, N.WAVE_ID: i, N.TOKENS: 1024, N.NUM_REQUESTS: 4}):
                pass
            with tel.span(N.MATERIALIZE, {N.STAGE: stage, N.WAVE_ID: i, N.EVICTIONS: 0}):
                pass
            with tel.span(N.SEND, {N.STAGE: stage, N.WAVE_ID: i, N.TOKENS: 1024}):
                pass
        with tel.span(N.WAVE_PLAN, {N.WAVE_ID: i, N.BUDGET: 8192, N.TOKENS: 1024,
                                    N.REQUEST_IDS: [f"req-{4 * i + k}" for k in range(4)]}):
            pass
    spans = list(tel.finished_spans())
    tel.shutdown()
    ring = SpanRing(capacity=n)
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    for s in spans:
        ring.on_end(s)
    used = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    return used / 1e6 * n / len(spans)


def throughput(engine: str, requests: int, repeats: int, span_us: float) -> dict[str, Any]:
    """Each repeat is one bench with the three modes back to back; ``span_share`` bounds the cost
    from below the machine's noise: spans of a run x the measured cost of one / its makespan."""
    receiver = OtlpReceiver(4318)
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    ratios: dict[str, list[float]] = {"on": [], "otlp": []}
    tput: dict[str, list[float]] = {"off": [], "on": [], "otlp": []}
    spans = 0
    shares: list[float] = []
    try:
        for i in range(repeats):
            modes = ["off", "on", "otlp"]
            modes = modes[i % 3:] + modes[:i % 3]          # rotated: no mode always runs first
            with tempfile.TemporaryDirectory() as tmp:
                out = Path(tmp) / "r.json"
                cmd = [WAVEPP, "bench", *BENCHES[engine], "--requests", str(requests), "--quiet",
                       "--telemetry", ",".join(modes), "--json", str(out)]
                subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL)
                runs = {r["telemetry"]: r for r in json.loads(out.read_text())["runs"]}
            for mode, r in runs.items():
                tput[mode].append(r["input_tokens_per_s"])
            for mode in ("on", "otlp"):
                ratios[mode].append(runs[mode]["input_tokens_per_s"] / runs["off"]["input_tokens_per_s"])
            spans = runs["otlp"]["spans"]
            shares.append(spans * span_us / 1e6 / runs["otlp"]["makespan_s"])
            assert not sum(runs["otlp"]["spans_dropped"].values()), runs["otlp"]["spans_dropped"]
    finally:
        received = receiver.num_spans
        receiver.close()
    return {"engine": engine, "requests": requests, "repeats": repeats, "spans_per_run": spans,
            "spans_received": received, "input_tokens_per_s": {m: statistics.median(v) for m, v in tput.items()},
            "ratio_to_off_median": {m: statistics.median(v) for m, v in ratios.items()},
            "ratio_to_off_each": ratios, "span_share_of_makespan": statistics.median(shares)}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--requests", default="torch=128,sim-realtime=512", help="per engine")
    p.add_argument("--repeats", type=int, default=6)
    p.add_argument("--engines", default="torch,sim-realtime")
    p.add_argument("--json", default=None)
    args = p.parse_args()
    per_span = per_span_cost()
    result: dict[str, Any] = {"per_span_us": per_span, "ring_mb_per_100k_spans": ring_memory()}
    print(json.dumps(result, indent=1), flush=True)
    result["throughput"] = []
    requests = dict(kv.split("=") for kv in args.requests.split(","))
    for engine in args.engines.split(","):
        r = throughput(engine, int(requests[engine]), args.repeats, per_span["otlp"]["process_us"])
        result["throughput"].append(r)
        print(json.dumps(r, indent=1), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
