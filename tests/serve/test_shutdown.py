"""`wavepp serve` stopping: a second signal stops at once and says so (a JSON 503 or a closed
connection for every request it cut, exit 1, the count on the last stderr line, no ASGI
tracebacks)."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx


def post(url: str, i: int, n: int = 2048) -> httpx.Response | httpx.HTTPError:
    ids = [(i * 7919 + t * 31) % 32000 for t in range(n)]
    try:
        return httpx.post(f"{url}/v1/prefill", json={"token_ids": ids}, timeout=120)
    except httpx.HTTPError as exc:          # a cut request may see its connection close
        return exc


def test_a_second_signal_cuts_the_drain_short_and_says_how_many_requests_it_cut(
        start_server: Callable[..., Any]) -> None:
    # Slow enough that none of the 8 finishes within the test; a drain long enough not to end by itself.
    server = start_server("--engine", "sim", "--pp", "2", "--kv-blocks", "2000", "--time-scale", "2000",
                          "--drain-s", "60")
    with ThreadPoolExecutor(8) as pool:
        running = [pool.submit(post, server.url, i) for i in range(8)]
        server.wait_for(lambda s: s["server"]["outstanding"] == 8)
        server.proc.send_signal(signal.SIGTERM)
        time.sleep(0.5)
        start = time.monotonic()
        server.proc.send_signal(signal.SIGTERM)
        code = server.proc.wait(30)
        stopped_s = time.monotonic() - start
        answers = [f.result(30) for f in running]
    errors = server.errors()
    assert code == 1, errors
    assert stopped_s < 10, errors                   # at once, not after the drain's 60 s
    for answer in answers:                           # each one a JSON 503 in our error shape, or a closed connection
        if isinstance(answer, httpx.Response):
            assert answer.status_code == 503, answer.text
            error = answer.json()["error"]
            assert set(error) == {"message", "type", "param", "code"} and error["code"] == 503, answer.text
            assert "second signal" in error["message"], answer.text
        else:
            assert isinstance(answer, httpx.TransportError), repr(answer)
    assert "Exception in ASGI application" not in errors and "CancelledError" not in errors, errors
    assert "every accepted request was answered" not in errors
    last = errors.strip().splitlines()[-1]
    assert "second signal" in last and "8 request(s) cut" in last, errors


DRAIN_S = 3.0
DRAIN_SLACK_S = 1.0        # the stop's own steps past the deadline, on a loaded two-core machine


def _stop_s(server: Any) -> float:
    """Seconds from SIGTERM to the process's exit."""
    start = time.monotonic()
    server.proc.send_signal(signal.SIGTERM)
    server.proc.wait(60)
    return time.monotonic() - start


def test_the_drain_deadline_bounds_the_whole_shutdown(start_server: Callable[..., Any]) -> None:
    """`--drain-s 3` with requests in flight whose waves take far longer: the process exits within
    the drain deadline after SIGTERM (beyond what an idle server takes to exit: the interpreter's
    own teardown), every request answered (a 503 at the deadline), exit 0."""
    flags = ("--engine", "sim", "--pp", "2", "--kv-blocks", "2000", "--time-scale", "5000", "--drain-s", str(DRAIN_S))
    idle = start_server(*flags)
    idle_s = _stop_s(idle)
    assert idle.proc.returncode == 0, idle.errors()
    server = start_server(*flags)
    with ThreadPoolExecutor(8) as pool:
        running = [pool.submit(post, server.url, i) for i in range(8)]
        server.wait_for(lambda s: s["server"]["outstanding"] == 8)
        stopped_s = _stop_s(server)
        answers = [f.result(30) for f in running]
    errors = server.errors()
    assert server.proc.returncode == 0, errors
    assert stopped_s < DRAIN_S + idle_s + DRAIN_SLACK_S, (round(stopped_s, 2), round(idle_s, 2), errors)
    for answer in answers:
        assert isinstance(answer, httpx.Response) and answer.status_code == 503, answer
    assert "8 request(s) cancelled at the drain deadline" in errors.strip().splitlines()[-1], errors
