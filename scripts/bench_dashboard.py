"""The live dashboard's benchmark (``make bench-dashboard``): a real headless browser against
(a) the embedded sim demo (``wavepp dashboard --engine sim``: llama-3-8b, H200, PP4, c = 64 in
real time) and (b) a synthetic span stream on Redis at chosen rates, up to several times the demo's.

Per target: page load -> first Pipeline chart (bars drawn), each page draw's time (p50/p99, from
the dashboard's draw log), the dashboard process's CPU share and RSS (first and last minute), and minute by
minute the RSS and the draws' p99 (whether memory is flat once the span window is full, and whether slow
draws cluster).
The synthetic stream replays a virtual-time sim run's spans re-timed onto the wall clock at the
rate asked (looped with fresh wave and request ids), so the view sees a deployment's span mix.

    python scripts/bench_dashboard.py --duration 600 --rates 2000,5000,10000 --json out/bench-dashboard.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

CHROMIUM = "/usr/bin/chromium"
FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
         "--no-first-run"]
WAVEPP = str(Path(sys.executable).parent / "wavepp")
CHART = ".js-plotly-plot .barlayer .point"


def free_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def proc_cpu_rss(pid: int) -> tuple[float, int]:
    """(CPU seconds so far, RSS bytes) of one process, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    cpu = (int(fields[11]) + int(fields[12])) / ticks
    rss = int(fields[21]) * os.sysconf("SC_PAGE_SIZE")
    return cpu, rss


def demo_prompt_tokens() -> int:
    """The demo's prompt length (``wavepp dashboard --engine sim``'s own rule: the largest up to 8192 whose
    longest reuse90 prompt fits llama-3-8b's context)."""
    from wavepp.runtime.engines.config import SimConfig
    from wavepp.runtime.engines.sim.engine import SimEngine
    from wavepp.runtime.sources.workloads import fit_prompt_tokens, parse_workload
    engine = SimEngine(SimConfig("llama-3-8b", "h200", 4))
    return fit_prompt_tokens(parse_workload("reuse90"), None, 8192, engine.max_context, engine.block_size)


def demo_rate(seconds: float = 20.0) -> float:
    """Spans a second the embedded sim demo's runtime emits (read as the dashboard reads them)."""
    from wavepp.dashboard import embedded
    from wavepp.dashboard.sources import EmbeddedSource
    from wavepp.runtime.engines.build import build_engine
    from wavepp.runtime.engines.config import SimConfig
    config = SimConfig("llama-3-8b", "h200", 4, clock="wall")
    knobs = build_engine(config).default_knobs()
    remote, proc = embedded.start_child(config, {"workload": "reuse90", "concurrency": 64,
                                               "prompt_tokens": demo_prompt_tokens(), "knobs": knobs})
    try:
        src = EmbeddedSource(remote)
        src.snapshot()
        t0, n0 = time.monotonic(), src.snapshot().received
        time.sleep(seconds)
        n1 = src.snapshot().received
        return (n1 - n0) / (time.monotonic() - t0)
    finally:
        proc.kill()


def recorded_spans() -> list[dict[str, Any]]:
    """A virtual-time sim run like the demo's (llama-3-8b, H200, PP4, reuse90, c = 64)."""
    from wavepp.runtime.bench.runs import BenchConfig, run_one
    from wavepp.runtime.engines.config import SimConfig
    from wavepp.runtime.engines.sim.engine import SimEngine
    from wavepp.runtime.sources.workloads import parse_workload
    cfg = BenchConfig(parse_workload("reuse90"), [64], ["wavepp"], 1500, prompt_tokens=demo_prompt_tokens())
    return run_one(SimEngine(SimConfig("llama-3-8b", "h200", 4)), cfg, "wavepp", 64).encoded


def stream_spans(url: str, spans: list[dict[str, Any]], rate: float, stop: threading.Event) -> None:
    """Append ``spans`` to the store's span stream at ``rate`` spans a second, re-timed onto the
    wall clock (their own spacing stretched to that rate), looping with fresh ids."""
    import redis

    from wavepp.store.urls import parse_store_url
    from wavepp.telemetry import names as N
    from wavepp.telemetry.redis_stream import SPAN_STREAM_CAP, runs_key, stream_key
    u = parse_store_url(url)
    client = redis.Redis.from_url(u.url)
    spans = sorted(spans, key=lambda s: s["t1"])
    first, last = spans[0]["t1"], spans[-1]["t1"]
    stretch = (len(spans) / rate) / ((last - first) / 1e9)          # wall seconds per virtual second
    waves = 1 + max(int(s["a"].get(N.WAVE_ID, 0)) for s in spans)
    run = "synthetic"
    client.hset(runs_key(u), run, f"synthetic stream {rate:,.0f} spans/s")
    start_ns, loop = time.time_ns(), 0
    period_ns = int((last - first) * stretch) + 1
    i = 0
    while not stop.is_set():
        now = time.time_ns()
        pipe = client.pipeline(transaction=False)
        sent = 0
        while i < len(spans):
            s = spans[i]
            base = start_ns + loop * period_ns
            t1 = base + int((s["t1"] - first) * stretch)
            if t1 > now:
                break
            a = dict(s["a"])
            if N.WAVE_ID in a:
                a[N.WAVE_ID] = int(a[N.WAVE_ID]) + loop * waves
            if N.REQUEST_ID in a:
                a[N.REQUEST_ID] = f"{a[N.REQUEST_ID]}.{loop}"
            if N.REQUEST_IDS in a:
                a[N.REQUEST_IDS] = [f"{r}.{loop}" for r in a[N.REQUEST_IDS]]
            ev = [[e[0], base + int((e[1] - first) * stretch), e[2]] for e in s.get("ev", ())]
            out = dict(s, a=a, ev=ev, run=run, t0=base + int((s["t0"] - first) * stretch), t1=t1,
                       id=f"{s.get('id', '')}.{loop}", p=f"{s.get('p', '')}.{loop}")
            pipe.xadd(stream_key(u), {"s": json.dumps(out, separators=(",", ":"))}, maxlen=SPAN_STREAM_CAP,
                      approximate=True)
            sent += 1
            i += 1
        if sent:
            pipe.execute()
        if i == len(spans):
            i, loop = 0, loop + 1
        time.sleep(0.05)
    client.delete(stream_key(u), runs_key(u))


def _p99(values: list[float]) -> float:
    return sorted(values)[min(len(values) - 1, int(0.99 * len(values)))]


def _by_minute(points: list[tuple[float, float]], of: Any, start: float | None = None) -> list[float | None]:
    """``of`` the values of each whole minute from ``start`` (default: the first point), rounded."""
    if not points:
        return []
    first = points[0][0] if start is None else start
    minutes: dict[int, list[float]] = {}
    for t, v in points:
        if t >= first:
            minutes.setdefault(int((t - first) // 60), []).append(v)
    return [round(of(minutes[m]), 3) if m in minutes else None for m in range(max(minutes, default=-1) + 1)]


def measure(args: list[str], duration: float, env: dict[str, str]) -> dict[str, Any]:
    from playwright.sync_api import sync_playwright
    port = free_port()
    log = Path(tempfile.mkdtemp(prefix="wavepp-bench-")) / "draws.txt"
    env = dict(env, WAVEPP_DASHBOARD_DRAW_LOG=str(log))
    proc = subprocess.Popen([WAVEPP, "dashboard", "--port", str(port), *args], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        url = f"http://127.0.0.1:{port}/"
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"wavepp dashboard exited with {proc.returncode}")
            try:
                urllib.request.urlopen(url + "_stcore/health", timeout=1)
                break
            except OSError:
                time.sleep(0.2)
        time.sleep(10)                                   # the run is under way when the operator looks
        samples: list[tuple[float, float, int]] = []
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
            page = browser.new_page(viewport={"width": 1500, "height": 1400})
            t0 = time.monotonic()
            page.goto(url)
            try:
                page.wait_for_selector(CHART, state="attached", timeout=180_000)
                first: float | None = time.monotonic() - t0
            except Exception:                            # noqa: BLE001 - reported as "no chart"
                first = None
            start = time.monotonic()
            while time.monotonic() - start < duration:
                cpu, rss = proc_cpu_rss(proc.pid)
                samples.append((time.monotonic(), cpu, rss))
                time.sleep(5)
            browser.close()
        lines = [line.split() for line in log.read_text().splitlines()] if log.exists() else []
        draws = [float(f[1]) for f in lines]
        minute = [s for s in samples if s[0] - samples[0][0] <= 60]
        tail = [s for s in samples if samples[-1][0] - s[0] <= 60]
        cpu_share = (samples[-1][1] - samples[0][1]) / max(samples[-1][0] - samples[0][0], 1e-9)
        load = os.getloadavg()[0]
        return {"first_chart_s": first, "draws": len(draws),
                "draw_p50_s": statistics.median(draws) if draws else None,
                "draw_p99_s": sorted(draws)[min(len(draws) - 1, int(0.99 * len(draws)))] if draws else None,
                "cpu_share": cpu_share, "rss_first_min_mb": max(s[2] for s in minute) / 2**20,
                "rss_last_min_mb": max(s[2] for s in tail) / 2**20, "load1": load,
                "rss_by_minute_mb": _by_minute([(t, rss / 2**20) for t, _, rss in samples], max),
                "draw_p99_by_minute_s": _by_minute([(float(f[0]), float(f[1])) for f in lines], _p99,
                                                   start=time.time() - (time.monotonic() - samples[0][0]))}
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--duration", type=float, default=600.0, help="seconds measured per target after the first chart")
    ap.add_argument("--rates", default="", help="synthetic stream rates in spans/s (default: 1x, 2.5x, 5x the demo's)")
    ap.add_argument("--store", default="redis://127.0.0.1:6379/13", help="the Redis the synthetic stream goes through")
    ap.add_argument("--skip-demo", action="store_true", help="measure the demo's span rate, not its page")
    ap.add_argument("--skip-synthetic", action="store_true", help="the embedded sim demo alone")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    rate = demo_rate()
    print(f"embedded sim demo: {rate:,.0f} spans/s (load {os.getloadavg()[0]:.1f})", flush=True)
    rows: list[dict[str, Any]] = []
    env = dict(os.environ, WAVEPP_BACKGROUND_CALIBRATION="off")
    if not args.skip_demo:
        rows.append({"target": "embedded sim demo", "rate": rate, **measure(["--engine", "sim"], args.duration, env)})
        print(rows[-1], flush=True)
    rates = [] if args.skip_synthetic else [float(r) for r in args.rates.split(",") if r] or [rate, 2.5 * rate,
                                                                                               5 * rate]
    spans = recorded_spans() if rates else []
    for r in rates:
        cluster = f"bench-dashboard-{os.getpid()}-{int(r)}"
        url = f"{args.store.rstrip('/')}?cluster={cluster}" if "?" not in args.store else args.store
        stop = threading.Event()
        writer = threading.Thread(target=stream_spans, args=(url, spans, r, stop), daemon=True)
        writer.start()
        try:
            rows.append({"target": "synthetic stream", "rate": r, **measure(["--store", url], args.duration, env)})
        finally:
            stop.set()
            writer.join(5)
        print(rows[-1], flush=True)
    print("| target | spans/s | first chart | draw p50 | draw p99 | CPU | RSS 1st min -> last min | load |")
    print("|---|---|---|---|---|---|---|---|")
    for row in rows:
        fc = f"{row['first_chart_s']:.1f} s" if row["first_chart_s"] is not None else "none"
        p50 = f"{row['draw_p50_s']:.2f} s" if row["draw_p50_s"] is not None else "-"
        p99 = f"{row['draw_p99_s']:.2f} s" if row["draw_p99_s"] is not None else "-"
        print(f"| {row['target']} | {row['rate']:,.0f} | {fc} | {p50} | {p99} | {row['cpu_share']:.0%} | "
              f"{row['rss_first_min_mb']:.0f} -> {row['rss_last_min_mb']:.0f} MB | {row['load1']:.1f} |")
    for row in rows:
        print(f"{row['target']} at {row['rate']:,.0f} spans/s, minute by minute: RSS (MB) {row['rss_by_minute_mb']}, "
              f"draw p99 (s) {row['draw_p99_by_minute_s']}")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps({"demo_rate": rate, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
