"""`wavepp stack` end to end: redis-server, `wavepp serve` and the dashboard as processes on loopback.
HTTP requests in; their spans in the Redis stream; the dashboard, in headless Chromium, drawing the
server's run; a knob changed over PUT /v1/knobs marked on the next wave's plan; SIGTERM stops it all."""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
from playwright.sync_api import sync_playwright

from wavepp.store.urls import parse_store_url
from wavepp.telemetry.redis_stream import read_spans

CHROMIUM = "/usr/bin/chromium"
FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
         "--no-first-run", "--enable-unsafe-swiftshader"]
ARTIFACTS = Path(__file__).resolve().parents[1] / "artifacts"


@pytest.fixture
def stack() -> Iterator[tuple[subprocess.Popen[str], dict[str, Any]]]:
    cluster = f"e2e{secrets.token_hex(3)}"
    proc = subprocess.Popen([sys.executable, "-m", "wavepp", "stack", "--port", "0", "--dashboard-port", "0",
                             "--engine", "sim", "--pp", "2", "--kv-blocks", "2000", "--time-scale", "0.2",
                             "--cluster", cluster], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line, f"wavepp stack did not start (exit {proc.wait(30)})"
    info = json.loads(line)
    yield proc, info
    if proc.poll() is None:
        proc.kill()
        proc.wait()
    for pid in info["pids"].values():           # never leave a part behind, whatever the test did
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def stream_spans(store: str) -> list[dict[str, Any]]:
    url = parse_store_url(store)
    client = redis.Redis.from_url(url.url)
    try:
        return read_spans(client, url)[0]
    finally:
        client.close()


def wait_for(check: Any, timeout_s: float = 30.0, what: str = "") -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.1)


def test_the_stack_end_to_end(stack: tuple[subprocess.Popen[str], dict[str, Any]]) -> None:
    proc, info = stack
    api = httpx.Client(base_url=info["api"], timeout=60)
    run = api.get("/v1/state").json()["run"]
    ids = []
    for i in range(8):                                  # HTTP in: a shared prefix, so later ones reuse it
        r = api.post("/v1/prefill", json={"token_ids": list(range(512)) + [i] * 300})
        assert r.status_code == 200, r.text
        ids.append(r.json()["id"])
    assert r.json()["reused_tokens"] == 512

    def requests_in_stream() -> set[str]:
        return {s["a"].get("wavepp.request.id") for s in stream_spans(info["store"])
                if s["n"] == "wavepp.request" and s.get("run") == run}
    wait_for(lambda: requests_in_stream() >= set(ids), what="the requests' spans in the Redis stream")

    # A knob changed over HTTP is marked on the plan of the next wave, in the stream.
    put = api.put("/v1/knobs", json={"changes": {"max_wave_tokens": 8192}})
    assert put.status_code == 200, put.text

    def marked_plans() -> list[dict[str, Any]]:
        return [s for s in stream_spans(info["store"]) if s["n"] == "wavepp.wave.plan" and s.get("run") == run
                and any(e[0] == "wavepp.knobs.changed" for e in s.get("ev", ()))]

    def next_wave_marked() -> list[dict[str, Any]]:
        assert api.post("/v1/prefill", json={"token_ids": list(range(1000, 1700))}).status_code == 200
        return marked_plans()
    plan = wait_for(next_wave_marked, what="the knob change on a wave plan")[0]
    [event] = [e for e in plan["ev"] if e[0] == "wavepp.knobs.changed"]
    assert "max_wave_tokens" in event[2]["wavepp.knobs.changed"] and event[2]["wavepp.knobs.max_wave_tokens"] == 8192
    state = api.get("/v1/state").json()
    assert state["budget"]["max_wave_tokens"] == 8192 and state["knobs_version"] == put.json()["version"]

    # The dashboard reads the same store: headless Chromium sees the server's run drawn per stage.
    if not Path(CHROMIUM).exists():
        pytest.fail("chromium is not installed: `make test` installs Debian's chromium package")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        page = browser.new_page(viewport={"width": 1500, "height": 1400})
        try:
            page.goto(info["dashboard"])
            page.wait_for_selector(".js-plotly-plot .barlayer .point", state="attached", timeout=90_000)
            wait_for(lambda: page.get_by_text(run).count() > 0, 60, "the server's run id on the page")
            chart = page.locator(".js-plotly-plot").first
            lanes = wait_for(lambda: {t.text_content() for t in chart.locator(".ytick text").all()}
                             >= {"stage 0", "stage 1"}, 60, "a lane per stage")
            assert lanes
            ARTIFACTS.mkdir(exist_ok=True)
            page.screenshot(path=str(ARTIFACTS / "stack-dashboard.png"), full_page=True)
        except Exception:
            ARTIFACTS.mkdir(exist_ok=True)
            page.screenshot(path=str(ARTIFACTS / "stack-timeout.png"), full_page=True)
            raise
        finally:
            browser.close()

    api.close()
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(90) == 0
    for name, pid in info["pids"].items():            # every part stopped with it
        assert subprocess.run(["kill", "-0", str(pid)], capture_output=True).returncode != 0, name
