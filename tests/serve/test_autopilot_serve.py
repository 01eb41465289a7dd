"""`wavepp serve --autopilot`: the autopilot runs beside the server's loop on the wall clock, fed from its
span ring; its decisions are spans and metrics a scrape reads."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import httpx


def test_a_server_with_the_autopilot_advising_decides_every_window_and_writes_no_knob(
        start_server: Callable[..., Any]) -> None:
    server = start_server("--engine", "sim", "--pp", "2", "--kv-blocks", "400", "--autopilot", "advise",
                          "--autopilot-window", "1")
    before = httpx.get(f"{server.url}/v1/knobs", timeout=30).json()["version"]
    deadline = time.monotonic() + 60
    decisions = 0.0
    i = 0
    while time.monotonic() < deadline and decisions < 3:
        ids = [(i * 7919 + t * 31) % 32000 for t in range(256)]
        assert httpx.post(f"{server.url}/v1/prefill", json={"token_ids": ids}, timeout=60).status_code == 200
        i += 1
        text = httpx.get(f"{server.url}/metrics", timeout=30).text
        decisions = sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                        if line.startswith("wavepp_autopilot_decisions_total{"))
    assert decisions >= 3, "the autopilot decided fewer than 3 windows in 60 s"
    assert "wavepp_autopilot_applies_total" not in text or "wavepp_autopilot_applies_total 0.0" in text
    assert httpx.get(f"{server.url}/v1/knobs", timeout=30).json()["version"] == before


def test_the_autopilot_record_is_read_and_written_over_http_behind_the_admin_token(
        start_server: Callable[..., Any]) -> None:
    server = start_server("--engine", "sim", "--pp", "2", "--kv-blocks", "400", "--autopilot", "on",
                          "--autopilot-window", "60", env={"WAVEPP_ADMIN_TOKEN": "s3cret"})
    url, auth = f"{server.url}/v1/autopilot", {"Authorization": "Bearer s3cret"}
    deadline = time.monotonic() + 30
    while (body := httpx.get(url, timeout=30).json())["settings"]["mode"] != "on" and time.monotonic() < deadline:
        time.sleep(0.2)                                   # the runner publishes its settings as it starts
    assert body["running"] and body["settings"]["window_s"] == 60.0 and body["last_decision"] is None
    assert httpx.put(url, json={"changes": {"mode": "off"}}, timeout=30).status_code == 401
    bad = httpx.put(url, json={"changes": {"mode": "sometimes", "cooldown": -1}}, headers=auth, timeout=30)
    assert bad.status_code == 422
    assert "mode" in bad.json()["error"]["message"] and "cooldown" in bad.json()["error"]["message"]
    inverted = httpx.put(url, json={"changes": {"bounds": {"ring": [9, 1]}}}, headers=auth, timeout=30)
    assert inverted.status_code == 422
    assert "bounds.ring: must be [lowest, highest]" in inverted.json()["error"]["message"]
    ok = httpx.put(url, json={"changes": {"frozen": True, "bounds": {"ring": [2, 8]}}}, headers=auth, timeout=30)
    assert ok.status_code == 200 and ok.json()["settings"]["frozen"] is True
    assert httpx.get(url, timeout=30).json()["settings"]["bounds"] == {"ring": [2, 8]}
