"""A real ``wavepp serve`` process for the API tests: started on a free port, driven over HTTP.

:class:`Server` starts the command, reads the line it prints once it listens (JSON with the URL),
waits for ``/ready`` and stops it with SIGTERM (the drain path), keeping its exit code and stderr.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

START_TIMEOUT_S = 90.0
# The fault matrix (faults/) takes minutes of killed and restarted processes: `make faults` runs it
# (WAVEPP_FAULTS=1), `make test` does not; CI runs both.
collect_ignore = [] if os.environ.get("WAVEPP_FAULTS") else ["faults"]


class Server:
    def __init__(self, *flags: str, env: dict[str, str] | None = None) -> None:
        self.stderr = tempfile.TemporaryFile()
        self.proc = subprocess.Popen([sys.executable, "-m", "wavepp", "serve", "--port", "0", *flags],
                                     stdout=subprocess.PIPE, stderr=self.stderr, text=True,
                                     env={**os.environ, **(env or {})})
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()          # printed once the server listens
        if not line:
            self.proc.wait(10)
            raise RuntimeError(f"wavepp serve did not start (exit {self.proc.returncode}): {self.errors()}")
        self.info: dict[str, Any] = json.loads(line)
        self.url: str = self.info["listening"]
        self.client = httpx.Client(base_url=self.url, timeout=60)
        deadline = time.monotonic() + START_TIMEOUT_S
        while self.client.get("/ready").status_code != 200:
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise RuntimeError(f"wavepp serve is not ready: {self.errors()}")
            time.sleep(0.05)

    def errors(self) -> str:
        self.stderr.seek(0)
        return self.stderr.read().decode(errors="replace")

    def state(self) -> dict[str, Any]:
        return dict(self.client.get("/v1/state").json())

    def wait_for(self, what: Callable[[dict[str, Any]], bool], timeout_s: float = 30.0) -> dict[str, Any]:
        """Poll /v1/state until ``what(state)`` holds; fails the test with the last state."""
        deadline = time.monotonic() + timeout_s
        while True:
            state = self.state()
            if what(state):
                return state
            if time.monotonic() > deadline:
                pytest.fail(f"state never matched within {timeout_s} s: {json.dumps(state)[:800]}")
            time.sleep(0.02)

    def wait_for_response(self, call: Callable[[], httpx.Response], what: Callable[[httpx.Response], bool],
                          timeout_s: float = 30.0) -> httpx.Response:
        """Repeat ``call`` until its response satisfies ``what``."""
        deadline = time.monotonic() + timeout_s
        while True:
            response = call()
            if what(response):
                return response
            if time.monotonic() > deadline:
                pytest.fail(f"no matching response within {timeout_s} s; last {response.status_code}: {response.text}")
            time.sleep(0.02)

    @staticmethod
    def clean(state: dict[str, Any]) -> bool:
        """No stage holds a lease or escrowed blocks."""
        return all(s["leases"] == 0 and s["escrowed"] == 0 for s in state["stages"])

    def stop(self, timeout_s: float = 60.0) -> int:
        """SIGTERM (drain), then the exit code."""
        self.client.close()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture(scope="session")
def server_class() -> type[Server]:
    """:class:`Server` for module-scoped fixtures (tests cannot import conftest under importlib mode)."""
    return Server


@pytest.fixture
def start_server() -> Iterator[Callable[..., Server]]:
    """Starts servers for one test; any still running at its end are killed."""
    started: list[Server] = []

    def start(*flags: str, env: dict[str, str] | None = None) -> Server:
        server = Server(*flags, env=env)
        started.append(server)
        return server

    yield start
    for server in started:
        server.kill()
