"""`wavepp serve` against the clients an operator meets on day one, over real
HTTP: clients that give up mid-request, and the policy knob switched under load. The server must
answer everyone else, keep `/ready` at 200, leave no lease or escrow behind, and log no lost
exception."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx

SWITCHED = ["wavepp", "wavepp+stage-admission=first-chunk", "trtllm-pp", "wavepp+reserve=whole-prompt",
            "trtllm-pp-legacy", "wavepp+admission=inline", "wavepp+lookup=first-stage"]


def prompt(rng: random.Random) -> list[int]:
    return [rng.randrange(32000) for _ in range(rng.randrange(500, 7000))]


def test_clients_that_give_up_at_random_moments_never_stop_the_loop(start_server: Callable[..., Any]) -> None:
    server = start_server("--engine", "sim", "--pp", "3", "--kv-blocks", "2000", "--time-scale", "20")
    rng = random.Random(23)
    gave_up = answered = 0
    for _ in range(60):                 # one after another, as the probe that found it
        try:
            r = httpx.post(f"{server.url}/v1/prefill", json={"token_ids": prompt(rng)},
                           timeout=httpx.Timeout(rng.uniform(0.005, 0.150), connect=5))
            assert r.status_code == 200, r.text
            answered += 1
        except httpx.TimeoutException:  # the client closes its connection: the server cancels
            gave_up += 1
    assert gave_up >= 10, (gave_up, answered)        # the probe's mix: many cut mid-request
    state = server.wait_for(lambda s: s["server"]["outstanding"] == 0 and server.clean(s))
    assert state["server"]["serving"] and state["server"]["error"] is None
    assert server.client.get("/ready").status_code == 200
    ok = server.client.post("/v1/prefill", json={"token_ids": list(range(300))})
    assert ok.status_code == 200, ok.text                          # it goes on serving
    assert server.stop() == 0
    errors = server.errors()
    assert "the pipeline loop stopped" not in errors and "never retrieved" not in errors, errors[-2000:]


def test_switching_the_policy_under_load_fails_no_request(start_server: Callable[..., Any]) -> None:
    server = start_server("--engine", "sim", "--pp", "3", "--kv-blocks", "2000", "--time-scale", "20")
    stop = threading.Event()
    switches = 0

    def switch() -> None:
        nonlocal switches
        with httpx.Client(base_url=server.url, timeout=30) as client:
            while not stop.is_set():
                r = client.put("/v1/knobs", json={"changes": {"policy": SWITCHED[switches % len(SWITCHED)]}})
                assert r.status_code == 200, r.text
                switches += 1
                time.sleep(0.08)

    def client(i: int) -> list[int]:
        rng = random.Random(i)
        with httpx.Client(base_url=server.url, timeout=120) as c:
            return [c.post("/v1/prefill", json={"token_ids": prompt(rng)}).status_code for _ in range(17)]

    switcher = threading.Thread(target=switch)
    switcher.start()
    try:
        with ThreadPoolExecutor(6) as pool:
            codes = [code for codes in pool.map(client, range(6)) for code in codes]
    finally:
        stop.set()
        switcher.join(30)
    assert codes == [200] * 102, {c: codes.count(c) for c in set(codes)}
    assert switches >= 10
    state = server.wait_for(server.clean)
    assert state["failed"] == 0 and server.client.get("/ready").status_code == 200
    assert server.stop() == 0, server.errors()
