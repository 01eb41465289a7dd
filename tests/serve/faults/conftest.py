"""The fault matrix (`make faults`): each test injects one fault into a running service and measures
how long the service takes to notice it and to recover.

A test's :class:`FaultRecord` (the ``fault`` fixture) keeps four moments on one monotonic clock:
*injected* (the fault begins), *detected* (the first sign an operator or a client sees: ``/ready``
503, a 503 naming the cause, a metric, the process's exit), *cleared* (the fault ends: the store is
back, a new server is started as a supervisor would), *recovered* (the first request answered 200
after that). Detect is measured from injected, recover from cleared. The table is printed at the
end of the run, and written as JSON and Markdown to ``$WAVEPP_FAULT_REPORT`` (a ``.json`` path; the
Markdown beside it) when that is set.

Helpers, as fixtures (tests under importlib mode cannot import a conftest): ``redis_proc`` (a
private ``redis-server`` on a port of its own that can be killed, restarted empty, paused and
resumed), ``load`` (closed-loop clients that record every answer), ``until`` (poll until a
condition holds) and ``stage_pids`` (a server's spawned stage processes).
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import socket
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis

from tests.processes import alive, stage_processes

REPORT_ENV = "WAVEPP_FAULT_REPORT"
_RECORDS = pytest.StashKey[list["FaultRecord"]]()


@dataclass
class FaultRecord:
    fault: str
    injected: float | None = None
    detected: float | None = None
    cleared: float | None = None
    recovered: float | None = None
    detected_by: str = ""
    recovered_by: str = ""
    facts: dict[str, Any] = field(default_factory=dict)

    def inject(self) -> float:
        self.injected = time.monotonic()
        return self.injected

    def detect(self, by: str, at: float | None = None) -> float:
        """The fault was seen (``at``: when; default now); returns the seconds since it was injected."""
        assert self.injected is not None, "detected before it was injected"
        self.detected, self.detected_by = (time.monotonic() if at is None else at), by
        return self.detected - self.injected

    def clear(self) -> float:
        self.cleared = time.monotonic()
        return self.cleared

    def recover(self, by: str, at: float | None = None) -> float:
        """Served again (``at``: when; default now); returns the seconds since the fault was cleared."""
        assert self.cleared is not None, "recovered before the fault was cleared"
        self.recovered, self.recovered_by = (time.monotonic() if at is None else at), by
        return self.recovered - self.cleared

    @property
    def detect_s(self) -> float | None:
        return None if self.detected is None or self.injected is None else self.detected - self.injected

    @property
    def recover_s(self) -> float | None:
        return None if self.recovered is None or self.cleared is None else self.recovered - self.cleared

    def as_dict(self) -> dict[str, Any]:
        return {"fault": self.fault, "detect_s": self.detect_s, "detected_by": self.detected_by,
                "recover_s": self.recover_s, "recovered_by": self.recovered_by, "facts": self.facts}


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def markdown(records: list[FaultRecord]) -> str:
    lines = ["| fault | detect (s) | detected by | recover (s) | recovered by | facts |", "|---|---|---|---|---|---|"]
    for r in records:
        facts = ", ".join(f"{k} {v}" for k, v in r.facts.items())
        lines.append(f"| {r.fault} | {_seconds(r.detect_s)} | {r.detected_by} | {_seconds(r.recover_s)} | "
                     f"{r.recovered_by} | {facts} |")
    return "\n".join(lines) + "\n"


def pytest_configure(config: pytest.Config) -> None:
    config.stash[_RECORDS] = []


@pytest.fixture
def fault(request: pytest.FixtureRequest) -> Iterator[FaultRecord]:
    """This test's record; it reaches the table only when the test passed."""
    doc = (request.function.__doc__ or request.node.name).strip().splitlines()[0].rstrip(".")
    if hasattr(request.node, "callspec"):
        doc += f": {request.node.callspec.id}"
    record = FaultRecord(doc)
    yield record
    report = getattr(request.node, "rep_call", None)
    if report is not None and report.passed:
        request.config.stash[_RECORDS].append(record)


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    if report.when == "call":
        item.rep_call = report        # type: ignore[attr-defined]
    return report


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    records = config.stash.get(_RECORDS, [])
    if not records:
        return
    terminalreporter.write_sep("-", "fault matrix: seconds to detect (from the fault) and to recover (from its end)")
    terminalreporter.write(markdown(records))
    path = os.environ.get(REPORT_ENV)
    if path:
        out = Path(path)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps({"faults": [r.as_dict() for r in records]}, indent=1) + "\n")
        out.with_suffix(".md").write_text(markdown(records))
        terminalreporter.write_line(f"written: {out} and {out.with_suffix('.md')}")


# ---- waiting ------------------------------------------------------------------------------------
def _until(what: Callable[[], Any], timeout_s: float = 30.0, step_s: float = 0.02,
           why: str | Callable[[], str] = "") -> float:
    """Poll ``what()`` until it is truthy; the monotonic time it first was. Fails the test on timeout,
    saying ``why`` (a callable: called then)."""
    deadline = time.monotonic() + timeout_s
    while True:
        if what():
            return time.monotonic()
        if time.monotonic() > deadline:
            pytest.fail(f"not within {timeout_s:g} s: {(why() if callable(why) else why) or what}")
        time.sleep(step_s)


@pytest.fixture
def until() -> Callable[..., float]:
    return _until


# ---- what a server says ---------------------------------------------------------------------------
def _metric(server: Any, name: str, **labels: str) -> float:
    """The sum of a Prometheus series' samples on ``server``'s /metrics whose labels include ``labels``."""
    total = 0.0
    for line in server.client.get("/metrics").text.splitlines():
        if line.startswith(name) and all(f'{k}="{v}"' in line for k, v in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
    return total


@pytest.fixture
def metric() -> Callable[..., float]:
    return _metric


def _answered_or_refused(clients: Load) -> dict[str, int]:
    """Every request a server that failed took was answered: 200, or 503 after the fault. What was sent
    once it stopped listening found no server - a refused connection; or, sent on a kept-alive
    connection as the server closed it, a reset after the failure was announced (the first 503): never
    taken (RFC 9112 9.3.1: the client may retry). Returns the counts."""
    answers = clients.snapshot()
    assert {a.status for a in answers} <= {200, 503, -1}
    announced = min(a.ended for a in answers if a.status == 503)
    assert all(a.text.startswith("ConnectError") or a.sent >= announced for a in answers if a.status == -1), \
        [(a.sent - announced, a.text) for a in answers if a.status == -1 and not a.text.startswith("ConnectError")][:3]
    return {"answered": sum(a.status == 200 for a in answers), "503": sum(a.status == 503 for a in answers)}


@pytest.fixture
def answered_or_refused() -> Callable[[Load], dict[str, int]]:
    return _answered_or_refused


def _first_answer(server: Any) -> None:
    """One short request, answered 200 (a restarted or recovered server serves)."""
    r = server.client.post("/v1/completions", json={"model": server.info["model"], "prompt": [1] * 64,
                                                     "max_tokens": 1})
    assert r.status_code == 200, r.text


@pytest.fixture
def first_answer() -> Callable[[Any], None]:
    return _first_answer


# ---- a private redis-server ---------------------------------------------------------------------
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class RedisProc:
    """``redis-server`` on a port of its own, without persistence: a restart comes back empty."""

    def __init__(self) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            pytest.fail("redis-server is not on PATH (`make services` installs it)")
        self.binary = binary
        self.port = _free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.start()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def client(self) -> redis.Redis:
        return redis.Redis(port=self.port, socket_timeout=2)

    def answers(self) -> bool:
        try:
            return bool(self.client().ping())
        except redis.RedisError:
            return False

    def start(self) -> None:
        self.proc = subprocess.Popen([self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
                                      "--appendonly", "no"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        _until(self.answers, 10.0, why=f"redis-server on {self.port} to answer")

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait()

    def pause(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGCONT)

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.kill()


@pytest.fixture
def redis_proc() -> Iterator[RedisProc]:
    proc = RedisProc()
    yield proc
    proc.close()


# ---- clients ------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Answer:
    sent: float
    ended: float
    status: int              # -1: no HTTP answer (connection refused or closed)
    text: str
    retry_after: str | None


class Load:
    """``clients`` closed-loop clients, each sending a prompt of ``tokens`` random ids and the next
    when its answer came (after a connection error, 50 ms later). Every answer is kept."""

    def __init__(self, url: str, model: str, clients: int = 4, tokens: int = 256, timeout_s: float = 60.0) -> None:
        self.url, self.model, self.tokens, self.timeout_s = url, model, tokens, timeout_s
        self.answers: list[Answer] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._client, args=(i,), daemon=True) for i in range(clients)]

    def __enter__(self) -> Load:
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(self.timeout_s + 5)
            assert not t.is_alive(), "a client never heard back"

    def _client(self, i: int) -> None:
        rng = random.Random(i)
        with httpx.Client(base_url=self.url, timeout=self.timeout_s) as client:
            while not self._stop.is_set():
                if self._send(client, rng).status != 200:
                    self._stop.wait(0.05)

    def send_one(self, seed: int) -> Answer:
        """One request on a connection of its own (an open-loop arrival), kept with the others."""
        with httpx.Client(base_url=self.url, timeout=self.timeout_s) as client:
            return self._send(client, random.Random(seed))

    def _send(self, client: httpx.Client, rng: random.Random) -> Answer:
        body = {"model": self.model, "prompt": [rng.randrange(1, 1000) for _ in range(self.tokens)], "max_tokens": 1}
        sent = time.monotonic()
        try:
            r = client.post("/v1/completions", json=body)
            answer = Answer(sent, time.monotonic(), r.status_code, r.text[:300], r.headers.get("retry-after"))
        except httpx.HTTPError as exc:
            answer = Answer(sent, time.monotonic(), -1, f"{type(exc).__name__}: {exc}"[:300], None)
        with self._lock:
            self.answers.append(answer)
        return answer

    def snapshot(self) -> list[Answer]:
        with self._lock:
            return list(self.answers)

    def first(self, status: int, after: float) -> Answer | None:
        """The first answer with ``status`` that ended after ``after``."""
        hits = [a for a in self.snapshot() if a.status == status and a.ended > after]
        return min(hits, key=lambda a: a.ended) if hits else None

    def statuses(self) -> Counter[int]:
        return Counter(a.status for a in self.snapshot())


@pytest.fixture
def load() -> Callable[..., Load]:
    return Load


# ---- a server's stage processes -----------------------------------------------------------------
@pytest.fixture
def stage_pids() -> Iterator[Callable[[int], list[int]]]:
    """``stage_pids(leader)``; every process it named is killed (and resumed first) at the end."""
    seen: set[int] = set()

    def find(leader: int) -> list[int]:
        pids = stage_processes(leader)
        seen.update(pids)
        return pids

    yield find
    for pid in seen:
        for sig in (signal.SIGCONT, signal.SIGKILL):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                break


@pytest.fixture
def is_alive() -> Callable[[int], bool]:
    return alive
