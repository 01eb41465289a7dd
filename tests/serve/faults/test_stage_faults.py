"""Faults of the stage processes and of the leader: the torch engine with spawned stages (PP2,
tiny-llama on the CPU) under four closed-loop clients. A stage killed or stopped past the link
timeout fails the loop: its requests are answered 503 naming the cause, the server exits 1 for
its supervisor, and no stage process outlives it; the leader killed with leases held leaves
registry entries that expire by their heartbeat's TTL and are reaped by the next leader."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import threading
import time
from collections.abc import Callable
from typing import Any

from wavepp.runtime.control.plane import LEASE_TTL_S
from wavepp.store.redis_store import RedisStore

SPAWN = ("--engine", "torch", "--launcher", "spawn", "--pp", "2")
LINK_TIMEOUT_S = 3


def _fails_for_its_supervisor(server: Any, clients: Any, fault: Any, until: Callable[..., float],
                              cause: str, timeout_s: float, label: str | None = None) -> None:
    """The fault is seen as a 503 naming ``cause`` (a regular expression); then the server exits 1 with
    it as its last line."""
    fault.detect(f"a 503: {label or cause}",
                 until(lambda: (a := clients.first(503, fault.injected)) is not None and re.search(cause, a.text),
                       timeout_s,
                       why=lambda: f"a 503 naming {cause!r}; answers {clients.statuses()}, 503s "
                                  f"{[a.text for a in clients.snapshot() if a.status == 503][:2]}, "
                                  f"server: {server.errors()[-600:]}"))
    until(lambda: server.proc.poll() is not None, 10, why="the server to exit")
    fault.facts["exited after (s)"] = round(time.monotonic() - fault.injected, 2)
    assert server.proc.returncode == 1
    assert "the pipeline loop stopped" in server.errors().strip().splitlines()[-1]


def _restart(start_server: Callable[..., Any], fault: Any, first_answer: Callable[[Any], None], *flags: str,
             env: dict[str, str] | None = None) -> Any:
    """What the supervisor does: a new server; recovered at its first answer."""
    fault.clear()
    server = start_server(*SPAWN, *flags, env=env)
    first_answer(server)
    fault.recover("a restarted server's first answer")
    return server


def test_a_stage_process_killed(start_server: Callable[..., Any], load: Any, until: Callable[..., float],
                                fault: Any, stage_pids: Callable[[int], list[int]],
                                is_alive: Callable[[int], bool], first_answer: Callable[[Any], None],
                                answered_or_refused: Callable[[Any], dict[str, int]]) -> None:
    """A stage process killed (SIGKILL) mid-load."""
    server = start_server(*SPAWN)
    (stage,) = stage_pids(server.proc.pid)
    with load(server.url, server.info["model"]) as clients:
        until(lambda: clients.statuses()[200] >= 8, 60, why="8 answers before the fault")
        fault.inject()
        os.kill(stage, signal.SIGKILL)
        _fails_for_its_supervisor(server, clients, fault, until, "stage 1 process was killed by SIGKILL", 10)
    fault.facts |= answered_or_refused(clients)
    assert not is_alive(stage)
    _restart(start_server, fault, first_answer).stop()


def test_a_stage_process_stopped_past_the_link_timeout(start_server: Callable[..., Any], load: Any,
                                                       until: Callable[..., float], fault: Any,
                                                       stage_pids: Callable[[int], list[int]],
                                                       is_alive: Callable[[int], bool],
                                                       first_answer: Callable[[Any], None],
                                                       answered_or_refused: Callable[[Any], dict[str, int]]) -> None:
    """A stage process stopped (SIGSTOP) past the link timeout (WAVEPP_DIST_TIMEOUT_S=3)."""
    env = {"WAVEPP_DIST_TIMEOUT_S": str(LINK_TIMEOUT_S)}
    server = start_server(*SPAWN, env=env)
    (stage,) = stage_pids(server.proc.pid)
    with load(server.url, server.info["model"]) as clients:
        until(lambda: clients.statuses()[200] >= 8, 60, why="8 answers before the fault")
        fault.inject()
        os.kill(stage, signal.SIGSTOP)
        # Either path says it: an overdue call ("within 3 s (stopped or stuck") or gloo's own timeout.
        cause = rf"(within|after) {LINK_TIMEOUT_S} s \(.*stopped or stuck"
        _fails_for_its_supervisor(server, clients, fault, until, cause, LINK_TIMEOUT_S + 10,
                                  f"no answer within {LINK_TIMEOUT_S} s (stopped or stuck)")
    fault.facts |= answered_or_refused(clients)
    # The stopped stage did not outlive its leader (it is killed, not left stopped).
    until(lambda: not is_alive(stage), 10, why="the stopped stage process to be gone")
    _restart(start_server, fault, first_answer, env=env).stop()


async def _entries(url: str) -> tuple[int, int]:
    """(live registry entries, every entry stored): a dead holder's entries stop being live at once
    when its TTL ends, and stop being stored when a reaper took them."""
    store = await RedisStore.connect(url)
    try:
        live = len(await store.registry_entries())
        stored = int(await store.client.hlen(store.key("registry", "entries")))
        return live, stored
    finally:
        await store.close()


def test_the_leader_killed_while_holding_leases(start_server: Callable[..., Any], redis_proc: Any, load: Any,
                                                until: Callable[..., float], fault: Any,
                                                stage_pids: Callable[[int], list[int]],
                                                is_alive: Callable[[int], bool]) -> None:
    """The leader killed (SIGKILL) while holding leases."""
    server = start_server(*SPAWN, "--store", redis_proc.url)
    (stage,) = stage_pids(server.proc.pid)
    with load(server.url, server.info["model"], clients=8, tokens=1024) as clients:
        until(lambda: clients.statuses()[200] >= 4, 60, why="answers before the fault")
        until(lambda: asyncio.run(_entries(redis_proc.url))[0] > 0, 30, 0.005, why="a lease held in the registry")
        fault.inject()
        server.proc.kill()
        server.proc.wait()
        held = asyncio.run(_entries(redis_proc.url))[1]
        # Its stage process sees its links close and exits; its entries stop being live by the TTL.
        until(lambda: not is_alive(stage), 15, why="the dead leader's stage process to exit")
        fault.facts["stage gone after (s)"] = round(time.monotonic() - fault.injected, 2)
        fault.detect("its registry entries expired (TTL)",
                     until(lambda: asyncio.run(_entries(redis_proc.url))[0] == 0, LEASE_TTL_S + 10, 0.1))
    assert held > 0
    fault.facts |= {"entries held": held, "lease TTL (s)": LEASE_TTL_S}
    assert fault.detect_s >= LEASE_TTL_S * 0.5       # the heartbeat's TTL, not sooner (kept alive till the kill)
    # The next leader on the store reaps them (its reaper, every TTL/2).
    fault.clear()
    restarted = start_server(*SPAWN, "--store", redis_proc.url)
    fault.recover("the next leader reaped them",
                  until(lambda: asyncio.run(_entries(redis_proc.url))[1] == 0, LEASE_TTL_S + 10, 0.1))
    assert restarted.stop() == 0


class _Throttle:
    """A slow stage: its process stopped ``stopped_ms`` of every ``period_ms`` (well under the link
    timeout), until :meth:`stop`."""

    def __init__(self, pid: int, stopped_ms: float = 90.0, period_ms: float = 100.0) -> None:
        self.pid, self.stopped_s, self.period_s = pid, stopped_ms / 1e3, period_ms / 1e3
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._done.is_set():
            os.kill(self.pid, signal.SIGSTOP)
            self._done.wait(self.stopped_s)
            os.kill(self.pid, signal.SIGCONT)
            self._done.wait(self.period_s - self.stopped_s)

    def stop(self) -> None:
        self._done.set()
        self._thread.join(5)
        os.kill(self.pid, signal.SIGCONT)


class _OpenLoop:
    """Requests sent at ``rate`` a second whatever the answers (each on a thread of its own, at most
    ``cap`` unanswered), every answer kept as :class:`Load` keeps them."""

    def __init__(self, clients: Any, rate: float, cap: int = 64) -> None:
        self.clients, self.rate, self.cap = clients, rate, cap
        self._done = threading.Event()
        self._open = threading.Semaphore(cap)
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        i = 0
        while not self._done.wait(1.0 / self.rate):
            if self._open.acquire(blocking=False):
                i += 1
                threading.Thread(target=self._one, args=(i,), daemon=True).start()

    def _one(self, i: int) -> None:
        try:
            self.clients.send_one(i)
        finally:
            self._open.release()

    def stop(self) -> None:
        self._done.set()
        self._thread.join(5)
        for _ in range(self.cap):                     # every request sent has its answer
            assert self._open.acquire(timeout=60), "a request never heard back"


def test_a_slow_stage_is_backpressure(start_server: Callable[..., Any], load: Any, until: Callable[..., float],
                                      fault: Any, stage_pids: Callable[[int], list[int]],
                                      first_answer: Callable[[Any], None]) -> None:
    """A slow stage (stopped 90% of the time) under open-loop arrivals, max_leases 8, max queue 4."""
    server = start_server(*SPAWN, "--max-queue", "4")
    (stage,) = stage_pids(server.proc.pid)
    # Bounded: at most 8 admitted (the max_leases knob an operator sets; default 1024) and 4 waiting.
    assert server.client.put("/v1/knobs", json={"changes": {"max_leases": 8}}).status_code == 200
    with load(server.url, server.info["model"], clients=2) as probe:       # what the server takes, closed loop
        time.sleep(1.0)
        start, seen = time.monotonic(), probe.statuses()[200]
        time.sleep(3.0)
        rate = (probe.statuses()[200] - seen) / (time.monotonic() - start)
    assert rate > 0
    assert server.state()["budget"]["max_leases"] == 8               # applied at the first wave
    clients = load(server.url, server.info["model"], clients=0)
    arrivals = _OpenLoop(clients, rate * 0.5)                                # half of it: no backpressure
    time.sleep(3.0)
    fault.facts |= {"rate (req/s)": round(rate * 0.5, 1), "429 before": clients.statuses()[429]}
    fault.inject()
    throttle = _Throttle(stage)
    try:
        fault.detect("a 429 with Retry-After", until(lambda: clients.first(429, fault.injected), 60))
        time.sleep(2.0)
    finally:
        fault.clear()
        throttle.stop()
        arrivals.stop()
    refused = [a for a in clients.snapshot() if a.status == 429]
    assert refused and all(a.retry_after is not None and int(a.retry_after) >= 1 for a in refused)
    assert set(clients.statuses()) <= {200, 429}, clients.statuses()         # refused or answered, nothing failed
    until(lambda: server.state()["server"]["outstanding"] == 0, 60, why="the queue to drain")
    first_answer(server)
    fault.recover("the queue drained and a new request answered")
    fault.facts |= {"answered": clients.statuses()[200], "429": clients.statuses()[429]}
    assert server.clean(server.state())
    assert server.stop() == 0
