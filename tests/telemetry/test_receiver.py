"""``python -m wavepp.telemetry.receiver``: its help says what it is in whole sentences, and SIGINT
or SIGTERM stops it within a second - also when it was started in the background by a shell,
which leaves SIGINT ignored in the child."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest

RECEIVER = [sys.executable, "-m", "wavepp.telemetry.receiver"]


def test_help_is_whole() -> None:
    done = subprocess.run([*RECEIVER, "--help"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0
    text = " ".join(done.stdout.split())
    assert "usage: python -m wavepp.telemetry.receiver" in text
    assert "decodes each POST /v1/traces (protobuf) with opentelemetry-proto and keeps the spans." in text
    assert "--port PORT port to listen on, 0 for any free one (default: 4318)" in text


def _ignore_sigint() -> None:            # what `cmd &` in a non-interactive shell does to the child
    signal.signal(signal.SIGINT, signal.SIG_IGN)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_stops_it_within_a_second(sig: signal.Signals) -> None:
    proc = subprocess.Popen([*RECEIVER, "--port", "0"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=_ignore_sigint)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().startswith("OTLP/HTTP receiver on http://127.0.0.1:")
        t0 = time.monotonic()
        proc.send_signal(sig)
        rc = proc.wait(5)
        assert time.monotonic() - t0 < 1.0 and rc == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
