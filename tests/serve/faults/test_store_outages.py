"""Faults of the shared store under load: Redis killed and restarted empty, paused briefly, paused
past ``--store-deadline``, and refusing writes. A sim server (on the wall clock) serves four
closed-loop clients throughout; no accepted request may be lost."""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import httpx

SIM = ("--engine", "sim", "--pp", "2")


def _ready(server: Any) -> int:
    try:
        return int(server.client.get("/ready", timeout=3).status_code)
    except httpx.HTTPError:
        return -1


def _no_request_lost(clients: Any) -> dict[str, int]:
    statuses = clients.statuses()
    assert set(statuses) == {200}, f"requests failed: {statuses} {[a for a in clients.answers if a.status != 200][:3]}"
    return {"answered": statuses[200]}


@contextmanager
def _serving(start_server: Callable[..., Any], load: Any, until: Callable[..., float],
             *flags: str) -> Iterator[tuple[Any, Any]]:
    """A sim server with ``flags`` and its clients, 20 answers into the load."""
    server = start_server(*SIM, *flags)
    with load(server.url, server.info["model"]) as clients:
        until(lambda: clients.statuses()[200] >= 20, why="20 answers before the fault")
        yield server, clients


def test_redis_killed_and_restarted_empty(start_server: Callable[..., Any], redis_proc: Any, load: Any,
                                          until: Callable[..., float], fault: Any,
                                          metric: Callable[..., float]) -> None:
    """Redis killed and restarted empty mid-load."""
    with _serving(start_server, load, until, "--store", redis_proc.url) as (server, clients):
        fault.inject()
        redis_proc.kill()
        fault.detect("/ready 503 (store false)", until(lambda: _ready(server) == 503, 10))
        time.sleep(2.0)
        fault.clear()
        redis_proc.start()
        fault.recover("an answer after the restart", until(lambda: clients.first(200, fault.cleared), 30))
        # The runtime wrote its deployment and knobs back into the empty store, and is ready again.
        until(lambda: redis_proc.client().exists("wavepp:{default}:knobs", "wavepp:{default}:deployment") == 2, 10,
              why="the knobs and deployment written back")
        until(lambda: _ready(server) == 200, 10, why="/ready 200 again")
    fault.facts |= _no_request_lost(clients)
    assert metric(server, "wavepp_store_failures_total", reason="unavailable") > 0
    assert server.stop() == 0
    assert "store unavailable, retrying with backoff" in server.errors()


def test_redis_paused_briefly_is_waited_out(start_server: Callable[..., Any], redis_proc: Any, load: Any,
                                            until: Callable[..., float], fault: Any) -> None:
    """Redis paused (SIGSTOP) for 3 s, no store deadline."""
    with _serving(start_server, load, until, "--store", redis_proc.url) as (server, clients):
        fault.inject()
        redis_proc.pause()
        fault.detect("/ready 503 (store false)", until(lambda: _ready(server) == 503, 10))
        time.sleep(max(0.0, 3.0 - (time.monotonic() - fault.injected)))
        fault.clear()
        redis_proc.resume()
        fault.recover("an answer after SIGCONT", until(lambda: clients.first(200, fault.cleared), 30))
        until(lambda: _ready(server) == 200, 10, why="/ready 200 again")
    fault.facts |= _no_request_lost(clients)
    assert server.stop() == 0


def test_redis_paused_past_the_store_deadline(start_server: Callable[..., Any], redis_proc: Any, load: Any,
                                              until: Callable[..., float], fault: Any,
                                              answered_or_refused: Callable[[Any], dict[str, int]],
                                              first_answer: Callable[[Any], None]) -> None:
    """Redis paused (SIGSTOP) past --store-deadline 2."""
    with _serving(start_server, load, until, "--store", redis_proc.url, "--store-deadline", "2") as (server, clients):
        fault.inject()
        redis_proc.pause()
        # Past the deadline the loop fails: its requests are answered 503 and the server exits 1, for
        # its supervisor to restart it.
        fault.detect("the server exits 1", until(lambda: server.proc.poll() is not None, 20))
        fault.facts["exit"] = server.proc.returncode
        assert server.proc.returncode == 1
        assert re.search(r"wavepp: error: .*unreachable for \d+ s \(deadline 2 s", server.errors()), server.errors()
        assert "Traceback" not in server.errors(), server.errors()
        fault.clear()
        redis_proc.resume()
        restarted = start_server(*SIM, "--store", redis_proc.url, "--store-deadline", "2")
        first_answer(restarted)
        fault.recover("a restarted server's first answer")
    fault.facts |= answered_or_refused(clients)
    assert all("store" in a.text or "deadline" in a.text for a in clients.snapshot() if a.status == 503)
    assert restarted.stop() == 0


def test_a_store_that_refuses_writes(start_server: Callable[..., Any], redis_proc: Any, load: Any,
                                     until: Callable[..., float], fault: Any, metric: Callable[..., float]) -> None:
    """Redis refusing every write (out of memory under noeviction)."""
    with _serving(start_server, load, until, "--store", redis_proc.url) as (server, clients):
        fault.inject()
        redis_proc.client().config_set("maxmemory", 1)           # reads answer, every write is refused
        fault.detect("/ready 503 and wavepp_store_failures_total{reason=refused}",
                     until(lambda: _ready(server) == 503
                           and metric(server, "wavepp_store_failures_total", reason="refused") > 0, 10))
        assert metric(server, "wavepp_store_up") == 0
        time.sleep(2.0)
        fault.clear()
        redis_proc.client().config_set("maxmemory", 0)
        until(lambda: _ready(server) == 200, 10, why="/ready 200 again")
        fault.recover("/ready 200 and wavepp_store_up 1", until(lambda: metric(server, "wavepp_store_up") == 1, 10))
    # The loop went on through the refusals: the writes waited and were retried, nothing failed.
    fault.facts |= _no_request_lost(clients)
    fault.facts["refused calls"] = int(metric(server, "wavepp_store_failures_total", reason="refused"))
    assert server.stop() == 0
    assert "refuses writes for now" in server.errors()
