"""A redis-server of a test's own (imported as ``tests.private_redis``): on a free port, without
persistence, so a test can restart it empty under a running runtime."""

from __future__ import annotations

import socket
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

import redis


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _start_redis(port: int, workdir: Path) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                             "--appendonly", "no", "--dir", str(workdir)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    client = redis.Redis(port=port, socket_connect_timeout=0.2)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            if client.ping():
                return proc
        except redis.RedisError:
            time.sleep(0.05)
    proc.kill()
    raise RuntimeError("redis-server did not start")


class PrivateRedis:
    """A redis-server of the test's own on a free port, which a run can see restart empty."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.port = _free_port()
        self.proc = _start_redis(self.port, workdir)
        self.restarted = threading.Event()

    def url(self, cluster: str) -> str:
        return f"redis://127.0.0.1:{self.port}/0?cluster={cluster}"

    def bounce(self, pause_s: float) -> None:
        """Kill the server, keep it down ``pause_s`` (the runtime runs on without it) and start it
        again, empty."""
        self.proc.kill()
        self.proc.wait()
        time.sleep(pause_s)
        self.proc = _start_redis(self.port, self.workdir)
        self.restarted.set()

    def restart_when(self, done_at: int, pause_s: float) -> Callable[[str, int, int], None]:
        """A bench progress callback: once ``done_at`` requests finished, :meth:`bounce` the server."""
        def progress(label: str, done: int, total: int) -> None:
            if done == done_at and not self.restarted.is_set():
                threading.Thread(target=self.bounce, args=(pause_s,), daemon=True).start()
        return progress

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait()
