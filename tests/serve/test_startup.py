"""`wavepp serve` starting: the port is taken before any work (a port in use is one line) but
listens only once the runtime is up, so a client is refused while it starts instead of being
accepted and hearing nothing; a SIGTERM while starting stops it cleanly."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest


def serve(*flags: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "wavepp", "serve", "--engine", "sim", *flags],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.fixture
def silent_store() -> Iterator[socket.socket]:
    """A TCP port that accepts connections and never answers: a server's start waits on it (the
    store client's PING) for its socket timeout."""
    sock = socket.create_server(("127.0.0.1", 0))
    sock.settimeout(60)
    yield sock
    sock.close()


def free_port() -> int:
    with socket.create_server(("127.0.0.1", 0)) as sock:
        return int(sock.getsockname()[1])


def test_the_port_listens_only_once_the_runtime_is_up_and_sigterm_while_starting_stops_cleanly(
        silent_store: socket.socket) -> None:
    port = free_port()
    proc = serve("--port", str(port), "--store", f"redis://127.0.0.1:{silent_store.getsockname()[1]}/0")
    try:
        store_client, _ = silent_store.accept()          # the runtime is starting: it waits for its store
        with pytest.raises(ConnectionRefusedError):      # not accepted and left unanswered
            socket.create_connection(("127.0.0.1", port), timeout=5).close()
        start = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    store_client.close()
    assert proc.returncode == 0, err
    assert time.monotonic() - start < 10, err            # the start was stopped, not waited out
    assert out == ""                                     # it never listened
    assert "Traceback" not in err, err
    assert err.strip().splitlines()[-1] == "wavepp serve: SIGTERM while starting: stopped (no request was accepted)"


def test_a_port_in_use_is_one_line_before_any_work() -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        proc = serve("--port", str(port))
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 2 and out == ""
    assert err == f"wavepp: error: cannot listen on 127.0.0.1:{port}: Address already in use\n"
