"""`wavepp stack`'s flags: what it sets itself is not offered, and ports it cannot use are refused
before any part starts."""

from __future__ import annotations

import socket

import pytest

from wavepp.runtime.cli import main


def test_the_stack_does_not_offer_a_store(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["stack", "--help"])
    assert exit_.value.code == 0
    text = capsys.readouterr().out
    assert "--dashboard-port" in text and "--store " not in text and "--store STORE" not in text
    assert main(["stack", "--store", "redis://127.0.0.1:6379/0"]) == 2
    assert "unrecognized arguments: --store" in capsys.readouterr().err


def test_two_parts_on_one_port_are_refused_up_front(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["stack", "--engine", "sim", "--port", "18765", "--dashboard-port", "18765"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--port and --dashboard-port are both 18765" in err, err


def test_a_port_in_use_is_named(capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        assert main(["stack", "--engine", "sim", "--port", "0", "--dashboard-port", str(port)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"--dashboard-port {port}: the port is in use" in err, err
