"""``wavepp stack`` (``make stack``): the compose topology as plain processes on loopback, where no
container engine runs - a private ``redis-server``, ``wavepp serve`` on it, and ``wavepp dashboard``
reading the same store.

Once all three answer it prints one JSON line (``api``, ``dashboard``, ``store``, ``pids``) and
waits. Ctrl-C or SIGTERM stops them in reverse order: the dashboard, the server (which drains),
then Redis; a child that dies stops the others and the stack exits 1 naming it.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from typing import IO, Any

from wavepp.runtime.serve.config import OPTIONS, resolve

START_TIMEOUT_S = 120.0


class StackError(Exception):
    """A part of the stack did not start or died (its name and how it ended)."""


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def serve_flags(given: dict[str, Any]) -> list[str]:
    """The ``wavepp serve`` flags given to the stack, passed on (the rest come from ``WAVEPP_*``; the
    admin token too, in the environment: :meth:`Stack.env`)."""
    flags = []
    for opt in OPTIONS:
        value = given.get(opt.dest)
        if value is None or opt.dest in ("host", "store", "admin_token"):
            continue
        flags += [opt.flag, ",".join(map(str, value)) if isinstance(value, list) else str(value)]
    return flags


class Stack:
    def __init__(self, given: dict[str, Any], dashboard_port: int, redis_port: int, cluster: str,
                 log: IO[bytes] | None = None) -> None:
        redis_bin = shutil.which("redis-server")
        if redis_bin is None:
            raise ValueError("redis-server is not installed (make services installs it)")
        self.redis_bin: str = redis_bin
        self.given = given
        self.redis_port = redis_port or free_port()
        self.dashboard_port = dashboard_port or free_port()
        self.store = f"redis://127.0.0.1:{self.redis_port}/0?cluster={cluster}"
        self.log = log
        self.dashboard_output = tempfile.TemporaryFile()   # read back when it does not start
        self.procs: dict[str, subprocess.Popen[Any]] = {}

    def check_ports(self) -> None:
        """ValueError naming a port two parts of the stack would share, or one already in use: said
        before anything starts, not as a part that "did not start"."""
        ports = {"--port": int(resolve(self.given)["port"]), "--dashboard-port": self.dashboard_port,
                 "--redis-port": self.redis_port}
        seen: dict[int, str] = {}
        for flag, port in ports.items():
            if port in seen:
                raise ValueError(f"{seen[port]} and {flag} are both {port}: each part of the stack needs its own port")
            if port != 0:
                seen[port] = flag
        for port, flag in seen.items():
            if not _bindable(port):
                raise ValueError(f"{flag} {port}: the port is in use on 127.0.0.1 (0 picks a free one)")

    def env(self) -> dict[str, str]:
        """The server's and the dashboard's environment: an ``--admin-token`` given to the stack
        reaches both as ``WAVEPP_ADMIN_TOKEN`` (never as a flag: a command line shows in ps)."""
        token = self.given.get("admin_token")
        return {**os.environ, "WAVEPP_ADMIN_TOKEN": token} if token else dict(os.environ)

    def start(self) -> dict[str, Any]:
        self.procs["redis"] = subprocess.Popen(
            [self.redis_bin, "--port", str(self.redis_port), "--bind", "127.0.0.1", "--save", "", "--appendonly",
             "no"], stdout=self.log or subprocess.DEVNULL, stderr=subprocess.STDOUT, start_new_session=True)
        self._wait("redis", lambda: _answers_ping(self.redis_port))
        wavepp = [sys.executable, "-m", "wavepp"]
        serve = subprocess.Popen([*wavepp, "serve", "--host", "127.0.0.1", "--store", self.store,
                                  *serve_flags(self.given)], stdout=subprocess.PIPE, stderr=self.log, text=True,
                                 start_new_session=True, env=self.env())
        self.procs["serve"] = serve
        assert serve.stdout is not None
        line = serve.stdout.readline()            # printed once it listens
        if not line:
            serve.wait(30)
            raise StackError(f"wavepp serve did not start ({_ended(serve)})")
        api = json.loads(line)["listening"]
        self._wait("serve", lambda: _http_ok(f"{api}/ready"))
        self.procs["dashboard"] = subprocess.Popen(
            [*wavepp, "dashboard", "--store", self.store, "--host", "127.0.0.1", "--port", str(self.dashboard_port)],
            stdout=self.log or self.dashboard_output, stderr=subprocess.STDOUT, start_new_session=True,
            env=self.env())
        dashboard = f"http://127.0.0.1:{self.dashboard_port}/"
        self._wait("dashboard", lambda: _http_ok(f"{dashboard}_stcore/health"))
        return {"api": api, "dashboard": dashboard, "store": self.store,
                "pids": {name: p.pid for name, p in self.procs.items()}}

    def _wait(self, name: str, ready: Callable[[], bool]) -> None:
        proc = self.procs[name]
        deadline = time.monotonic() + START_TIMEOUT_S
        while not ready():
            if proc.poll() is not None:
                raise StackError(f"{name} did not start ({_ended(proc)}){self._last_words(name)}")
            if time.monotonic() > deadline:
                raise StackError(f"{name} did not answer within {START_TIMEOUT_S:g} s")
            time.sleep(0.1)

    def _last_words(self, name: str) -> str:
        """The last line a part that ended wrote (what it said was wrong), where the stack kept it."""
        if name != "dashboard" or self.log is not None:
            return ""
        self.dashboard_output.seek(0)
        lines = [ln.strip() for ln in self.dashboard_output.read().decode(errors="replace").splitlines() if ln.strip()]
        return f": {lines[-1]}" if lines else ""

    def watch(self) -> None:
        """Until a part dies: StackError naming it."""
        while True:
            for name, proc in self.procs.items():
                if proc.poll() is not None:
                    raise StackError(f"{name} stopped ({_ended(proc)})")
            time.sleep(0.2)

    def stop(self) -> None:
        """Reverse order; the server gets its drain time, then each part is killed if it hangs."""
        for name in reversed(list(self.procs)):
            proc = self.procs[name]
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(60 if name == "serve" else 10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        self.dashboard_output.close()


def run_stack(given: dict[str, Any], dashboard_port: int, redis_port: int, cluster: str,
              announce: Callable[..., None] = print) -> int:
    stack = Stack(given, dashboard_port, redis_port, cluster)
    stack.check_ports()
    previous = {sig: signal.signal(sig, _raise_interrupt) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        announce(json.dumps(stack.start()), flush=True)
        stack.watch()
    except KeyboardInterrupt:          # Ctrl-C or SIGTERM: an orderly stop is the normal end of a stack
        return 0
    finally:
        for sig in previous:           # a second signal must not cut the stop short (orphans)
            signal.signal(sig, signal.SIG_IGN)
        stack.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return 0


def _raise_interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)   # as the servers bind: TIME_WAIT is no obstacle
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _answers_ping(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as sock:
            sock.sendall(b"PING\r\n")
            return sock.recv(16).startswith(b"+PONG")
    except OSError:
        return False


def _http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1) as r:
            return bool(r.status == 200)
    except OSError:
        return False


def _ended(proc: subprocess.Popen[Any]) -> str:
    code = proc.poll()
    if code is None:
        return "still running"
    if code < 0:
        return f"killed by {signal.Signals(-code).name}"
    return f"exit {code}"
