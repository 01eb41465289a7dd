"""Measure the dashboard: Pipeline render time at 20,000+ bars, and span-to-screen delay live.

    python -m dashboard.render_bench            # render and live; needs /usr/bin/chromium
    python -m dashboard.render_bench halve      # what halving the wave budget does mid-run
    python -m dashboard.render_bench cpu        # the dashboard's CPU on a finished 100k-span run
    python -m dashboard.render_bench marker     # span -> screen delay of a knob marker at 100k spans (after cpu)

Render: a saved sim run with >= 20,000 execute bars; server side (tables + figures + JSON) timed
in-process, then the page timed in headless chromium from navigation to the whole-run chart drawn.
Live: the embedded dashboard in chromium; the page's own "newest span ended X s before this
render" caption is read every 0.5 s for 15 s (the delay from a span's end to the page showing it).
CPU: a finished sim run of >= 100,000 spans in a Redis store, `wavepp dashboard --store` on it, the
server process's CPU share (user + system, /proc) with no viewer and with one headless chromium
viewer on the Pipeline page. Marker: on that run, a wave-plan span with a knob change is appended
to the stream; the time until its marker is drawn on the viewed page (the dashboard's part of a
knob change's way to the screen; the runtime adds its next wave boundary and ~0.1 s of export).
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from wavepp.dashboard import charts
from wavepp.dashboard.frames import idle_window
from wavepp.dashboard.sources import RunFileSource
from wavepp.dashboard.view import make_view

CHROMIUM = "/usr/bin/chromium"
FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
         "--no-first-run", "--enable-unsafe-swiftshader"]
WAVEPP = str(Path(sys.executable).parent / "wavepp")


def _serve(port: int, *args: str) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen([WAVEPP, "dashboard", "--port", str(port), *args],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(300):
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=1):
                return proc
        except OSError:
            time.sleep(0.2)
    proc.kill()
    raise RuntimeError("dashboard did not start")


def render(port: int = 8590) -> None:
    from playwright.sync_api import sync_playwright
    path = Path(tempfile.mkdtemp()) / "big.json.gz"
    subprocess.run([WAVEPP, "bench", "--model", "llama-3-8b", "--hardware", "h200", "--pp", "4", "--workload",
                    "suffix:512", "--concurrency", "4", "--requests", "5200", "--prompt-tokens", "1024",
                    "--policy", "wavepp", "--quiet", "--save-run", str(path)], check=True, capture_output=True)
    src = RunFileSource(str(path))
    t0 = time.perf_counter()
    view = make_view(src, src.snapshot())
    t1 = time.perf_counter()
    fig_h = charts.history(view.frames).to_json()
    end = view.frames.end
    idle = idle_window(view.idle, view.frames.origin_ns, max(0.0, end - end / 20), end)
    fig_t = charts.timeline(view.frames, max(0.0, end - end / 20), end, idle).to_json()
    t2 = time.perf_counter()
    bars = int((view.frames.steps["kind"] == "execute").sum())
    print(f"execute bars: {bars}; tables {t1 - t0:.3f} s; figures+JSON {t2 - t1:.3f} s "
          f"({len(fig_h) / 1e6:.1f} MB history, {len(fig_t) / 1e6:.2f} MB detail)")
    proc = _serve(port, "--run", str(path))
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
            page = browser.new_page(viewport={"width": 1500, "height": 1400})
            for attempt in range(3):
                t = time.perf_counter()
                page.goto(f"http://127.0.0.1:{port}/")
                page.wait_for_selector(".js-plotly-plot .barlayer .point", timeout=120_000)
                page.wait_for_function("document.querySelectorAll('.js-plotly-plot').length >= 3", timeout=120_000)
                page.wait_for_selector(".js-plotly-plot .heatmaplayer image", timeout=120_000)
                print(f"browser: Pipeline page with {bars} bars drawn in {time.perf_counter() - t:.2f} s "
                      f"(load {attempt + 1})")
            browser.close()
    finally:
        proc.terminate()
        proc.wait(10)


def live(port: int = 8591, seconds: float = 15.0) -> None:
    from playwright.sync_api import sync_playwright
    proc = _serve(port)
    ages = []
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
            page = browser.new_page()
            page.goto(f"http://127.0.0.1:{port}/")
            page.wait_for_selector("text=newest span ended", timeout=120_000)
            end = time.monotonic() + seconds
            while time.monotonic() < end:
                text = page.get_by_text("newest span ended").first.text_content() or ""
                ages.append(float(text.split("ended ")[1].split(" s")[0]))
                time.sleep(0.5)
            browser.close()
    finally:
        proc.terminate()
        proc.wait(10)
    print(f"span-to-screen delay (embedded, {len(ages)} reads): median {statistics.median(ages):.2f} s, "
          f"max {max(ages):.2f} s")


def halve() -> None:
    """Halve M and b_min halfway through a reuse90 run (sim, virtual time) and compare the windows
    before and after with the same tables the Pipeline and Admission pages draw."""
    import asyncio

    from wavepp.dashboard.frames import build
    from wavepp.runtime.control.knobs import Knobs
    from wavepp.runtime.engines.config import SimConfig
    from wavepp.runtime.engines.sim.clock import run_virtual
    from wavepp.runtime.engines.sim.engine import SimEngine
    from wavepp.runtime.loop import LoopConfig, PipelineLoop
    from wavepp.runtime.sources.workloads import Workload, parse_workload
    from wavepp.telemetry.span_codec import encode

    engine = SimEngine(SimConfig("llama-3-8b", "h200", 4))
    parts, tel = engine.build(), engine.telemetry()
    workload = Workload(parse_workload("reuse90"), 1200, 8192, 64, engine.vocab_size, 0)

    async def main() -> None:
        store = await engine.open_store()
        loop = PipelineLoop(parts, store, Knobs(), workload, tel, LoopConfig(64))
        run = asyncio.create_task(loop.run())
        while loop.num_finished < 600:
            await asyncio.sleep(0.01)
        loop.set_knobs(Knobs(max_wave_tokens=8192, min_wave_tokens=4096))
        await run

    run_virtual(main())
    fr = build([encode(s) for s in tel.finished_spans()], 4)
    change = fr.knob_marks[0][0]
    for name, (a, b) in {"before": (0.3 * change, change), "after": (change, 0.98 * fr.end)}.items():
        ex = fr.steps[fr.steps["kind"] == "execute"]
        busy = [float((ex[ex.stage == s].t1.clip(a, b) - ex[ex.stage == s].t0.clip(a, b)).clip(0).sum()) / (b - a)
                for s in range(4)]
        rounds = fr.rounds[(fr.rounds.admitted > 0) & (fr.rounds.t >= a) & (fr.rounds.t < b)].t.sort_values()
        gaps = list(rounds.diff().dropna() * 1e3)           # cadence: between rounds that admitted something
        plans = fr.plans[(fr.plans.t >= a) & (fr.plans.t < b)]
        print(f"{name}: stage busy {[round(x, 3) for x in busy]}, admission interval p50 "
              f"{statistics.median(gaps):.2f} ms max {max(gaps):.2f} ms, budget {plans.budget.median():.0f}, "
              f"{plans.tokens.mean():.0f} tokens/wave, {len(plans) / (b - a):.1f} waves/s")


def _cpu_share(pid: int, seconds: float) -> float:
    """Share of one core the process used over ``seconds`` (all its threads)."""
    def ticks() -> int:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return int(fields[11]) + int(fields[12])          # utime, stime
    hz = os.sysconf("SC_CLK_TCK")
    before, t0 = ticks(), time.monotonic()
    time.sleep(seconds)
    return (ticks() - before) / hz / (time.monotonic() - t0)


def cpu(url: str = "redis://127.0.0.1:6379/13?cluster=render-bench-cpu", port: int = 8592,
        seconds: float = 30.0) -> None:
    import redis
    from playwright.sync_api import sync_playwright
    subprocess.run([WAVEPP, "bench", "--model", "llama-3-8b", "--hardware", "h200", "--pp", "4", "--workload",
                    "suffix:512", "--concurrency", "4", "--requests", "19000", "--prompt-tokens", "1024",
                    "--policy", "wavepp", "--quiet", "--store", url, "--reset-store"], check=True, capture_output=True)
    cluster = url.split("cluster=")[1]
    spans = redis.Redis.from_url(url.split("?")[0]).xlen(f"wavepp:{{{cluster}}}:spans")
    proc = _serve(port, "--store", url)
    try:
        idle = _cpu_share(proc.pid, seconds / 2)
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
            page = browser.new_page(viewport={"width": 1500, "height": 1400})
            t = time.perf_counter()
            page.goto(f"http://127.0.0.1:{port}/")
            page.wait_for_selector(".js-plotly-plot .heatmaplayer image", timeout=300_000)
            drawn = time.perf_counter() - t
            time.sleep(20)                                  # the first draw's tail (charts still arriving)
            viewed = _cpu_share(proc.pid, seconds)
            browser.close()
    finally:
        proc.terminate()
        proc.wait(10)
    print(f"finished run of {spans} spans: Pipeline page drawn in {drawn:.1f} s; dashboard server CPU "
          f"{idle:.1%} of a core with no viewer, {viewed:.1%} with one viewer (over {seconds:.0f} s)")


def marker(url: str = "redis://127.0.0.1:6379/13?cluster=render-bench-cpu", port: int = 8593,
           repeats: int = 3) -> None:
    import json

    import redis
    from playwright.sync_api import sync_playwright

    from wavepp.telemetry import names as N
    client = redis.Redis.from_url(url.split("?")[0])
    key = f"wavepp:{{{url.split('cluster=')[1]}}}:spans"
    rows: list[Any] = client.xrevrange(key, count=5000) or []
    plan = next(json.loads(f[b"s"]) for _, f in rows if b'"wavepp.wave.plan"' in f[b"s"])
    spans = client.xlen(key)
    proc = _serve(port, "--store", url)
    delays: dict[str, list[float]] = {}
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
            page = browser.new_page(viewport={"width": 1500, "height": 1400})
            page.goto(f"http://127.0.0.1:{port}/")
            for name in ("Admission", "Pipeline"):
                page.get_by_text(name, exact=True).first.click()
                page.wait_for_selector(".js-plotly-plot", timeout=300_000)
                time.sleep(3)
                for i in range(repeats):
                    # A value no earlier invocation wrote (their markers stay in the stream).
                    value = 64 * (int(time.time() * 10) % 10**7) + i
                    t = plan["t1"] + 1_000_000 * (i + 1)
                    span = {**plan, "id": f"marker{name}{i}", "t0": t, "t1": t,
                            "ev": [[N.EVENT_KNOBS, t, {N.KNOBS_CHANGED: ["max_wave_tokens"],
                                                       "wavepp.knobs.max_wave_tokens": value}]]}
                    plan = span
                    start = time.monotonic()
                    client.xadd(key, {"s": json.dumps(span)})
                    page.wait_for_function(f"document.body.innerHTML.includes('max_wave_tokens={value}')",
                                           timeout=60_000, polling=50)
                    delays.setdefault(name, []).append(time.monotonic() - start)
                    time.sleep(2)
            browser.close()
    finally:
        proc.terminate()
        proc.wait(10)
    for name, ds in delays.items():
        print(f"{spans} spans: knob marker on {name} drawn {statistics.median(ds):.2f} s (median of {len(ds)}, "
              f"max {max(ds):.2f} s) after its span reached the stream")


if __name__ == "__main__":
    if sys.argv[1:] == ["halve"]:
        halve()
    elif sys.argv[1:] == ["cpu"]:
        cpu()
    elif sys.argv[1:] == ["marker"]:
        marker()
    else:
        render()
        live()
