"""`wavepp serve` on the sim engine (slowed wall clock) under pressure, over real HTTP: 429 with
Retry-After when the admission queue is full, a client disconnect releasing its lease and escrow on
every stage, and SIGTERM draining (in-flight requests answered, new ones 503, the rest cancelled
at the deadline)."""

from __future__ import annotations

import json
import signal
import socket
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from urllib.parse import urlparse

import httpx

BLOCK = 64


def ids(i: int, n: int = 2048) -> list[int]:
    return [(i * 7919 + t * 31) % 32000 for t in range(n)]


def post(url: str, i: int, n: int = 2048) -> httpx.Response:
    return httpx.post(f"{url}/v1/prefill", json={"token_ids": ids(i, n)}, timeout=120)


def test_a_full_admission_queue_answers_429_with_retry_after(start_server: Callable[..., Any]) -> None:
    # 100 KV blocks per stage hold three 32-block prompts: the rest wait for admission, at most 4 of them.
    server = start_server("--engine", "sim", "--pp", "2", "--kv-blocks", "100", "--max-queue", "4",
                          "--time-scale", "30")
    with ThreadPoolExecutor(24) as pool:
        answers = list(pool.map(lambda i: post(server.url, i), range(24)))
    codes = [r.status_code for r in answers]
    assert set(codes) <= {200, 429}, codes
    assert codes.count(200) >= 7 and codes.count(429) >= 5, codes
    for r in answers:
        if r.status_code == 429:
            assert int(r.headers["retry-after"]) >= 1
            assert r.json()["error"]["type"] == "rate_limit_exceeded"
    state = server.wait_for(server.clean)
    assert state["server"]["outstanding"] == 0 and state["failed"] == 0
    assert state["server"]["max_prompt_tokens"] == 100 * BLOCK          # what a stage's KV pool holds
    too_long = post(server.url, 99, 100 * BLOCK + 1)                    # could never be served: refused up front
    assert too_long.status_code == 422 and too_long.json()["error"]["param"] == "token_ids"
    assert server.stop() == 0, server.errors()


def test_a_client_that_disconnects_releases_its_lease_and_escrow_on_every_stage(
        start_server: Callable[..., Any]) -> None:
    server = start_server("--engine", "sim", "--pp", "3", "--kv-blocks", "1000", "--time-scale", "100")
    # Small waves: the prompt takes eight, so its suffix stays escrowed while its first chunks run.
    version = server.client.put("/v1/knobs", json={"changes": {"min_wave_tokens": 512, "max_wave_tokens": 512}})
    assert version.status_code == 200, version.text
    assert post(server.url, 0, 256).status_code == 200               # a wave boundary: the knobs apply
    server.wait_for(lambda s: s["knobs_version"] == version.json()["version"])
    where = urlparse(server.url)
    body = json.dumps({"token_ids": ids(1, 4096)}).encode()
    sock = socket.create_connection((where.hostname, where.port))
    sock.sendall(b"POST /v1/prefill HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
    held = server.wait_for(lambda s: all(st["leases"] == 1 and st["escrowed"] > 0 for st in s["stages"]))
    assert held["active"] == 1 and held["in_flight"] >= 1
    sock.close()                                         # the client goes away mid-prefill
    state = server.wait_for(lambda s: s["server"]["cancelled"] == 1 and server.clean(s) and s["active"] == 0
                            and s["in_flight"] == 0)
    assert state["server"]["outstanding"] == 0 and state["finished"] == 2    # the warm-up and the cancelled one
    for st in state["stages"]:                           # every block is free or cached again
        assert st["free"] + st["cached"] == st["capacity"], st
    ok = post(server.url, 2, 512)                        # the server goes on serving
    assert ok.status_code == 200, ok.text
    assert server.stop() == 0, server.errors()          # its stop checks no stage kept a lease or escrow


def test_sigterm_drains_in_flight_requests_and_refuses_new_ones_with_503(
        start_server: Callable[..., Any]) -> None:
    server = start_server("--engine", "sim", "--pp", "2", "--kv-blocks", "1000", "--time-scale", "60",
                          "--drain-s", "60")
    with ThreadPoolExecutor(3) as pool:
        running = [pool.submit(post, server.url, i) for i in range(3)]
        server.wait_for(lambda s: s["server"]["outstanding"] == 3)
        server.proc.send_signal(signal.SIGTERM)
        refused = server.wait_for_response(lambda: post(server.url, 9, 256), lambda r: r.status_code == 503)
        assert refused.json()["error"]["type"] == "service_unavailable" and "draining" in refused.text
        assert httpx.get(f"{server.url}/ready").status_code == 503
        assert [f.result().status_code for f in running] == [200, 200, 200]
    assert server.proc.wait(60) == 0
    assert "every accepted request was answered" in server.errors()


def test_the_drain_deadline_cancels_what_is_left(start_server: Callable[..., Any]) -> None:
    server = start_server("--engine", "sim", "--pp", "2", "--kv-blocks", "1000", "--time-scale", "2000",
                          "--drain-s", "0.5")
    answer: list[httpx.Response] = []
    worker = threading.Thread(target=lambda: answer.append(post(server.url, 1, 4096)))
    worker.start()
    server.wait_for(lambda s: s["active"] == 1)
    start = time.monotonic()
    server.proc.send_signal(signal.SIGTERM)
    assert server.proc.wait(30) == 0
    worker.join(30)
    assert time.monotonic() - start < 20
    assert answer and answer[0].status_code == 503 and "shut down" in answer[0].json()["error"]["message"]
    assert answer[0].json()["error"]["type"] == "service_unavailable" and answer[0].headers["retry-after"] == "5"
    assert "1 request(s) cancelled at the drain deadline" in server.errors()


def test_a_request_that_cannot_fit_the_queue_is_422_and_a_429_says_how_many_are_waiting(
        start_server: Callable[..., Any]) -> None:
    # 100 KV blocks per stage hold three 32-block prompts; a slow clock keeps the rest waiting.
    server = start_server("--engine", "sim", "--pp", "2", "--kv-blocks", "100", "--max-queue", "4",
                          "--time-scale", "2000")

    def completions(num_prompts: int) -> httpx.Response:
        prompts = [ids(100 + i, 256) for i in range(num_prompts)]
        return httpx.post(f"{server.url}/v1/completions", json={"prompt": prompts, "max_tokens": 0}, timeout=120)

    too_many = completions(5)                       # more prompts than the queue holds: can never succeed
    assert too_many.status_code == 422, too_many.text
    error = too_many.json()["error"]
    assert error["param"] == "prompt" and "5 prompts" in error["message"] and "4" in error["message"], error
    assert "retry-after" not in too_many.headers
    pool = ThreadPoolExecutor(8)
    try:
        for i in range(5):                          # 3 admitted, 2 waiting
            pool.submit(post, server.url, i)
        server.wait_for(lambda s: s["active"] == 3 and s["server"]["queued"] == 2)
        no_room = completions(3)                    # 2 waiting + 3 > 4: refused for now
        assert no_room.status_code == 429, no_room.text
        message = no_room.json()["error"]["message"]
        assert "2 requests waiting" in message and "4" in message, message
        assert int(no_room.headers["retry-after"]) >= 1
        for i in range(5, 7):                       # the queue is full: 4 waiting
            pool.submit(post, server.url, i)
        server.wait_for(lambda s: s["server"]["queued"] == 4)
        full = post(server.url, 9, 256)             # answered by the admission gate
        assert full.status_code == 429
        assert "4 requests waiting" in full.json()["error"]["message"], full.text
    finally:
        server.kill()
        pool.shutdown(wait=True, cancel_futures=True)
