"""Faults during a run: signals, dead stage processes, a later run failing. Each ends within
seconds in one line (no traceback, no orphan process); every test runs under a timeout."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.processes import alive, stage_processes
from wavepp.runtime.bench import runs as bench
from wavepp.runtime.cli import main

WAVEPP = Path(sys.executable).parent / "wavepp"
SIM = ["bench", "--model", "llama-3-8b", "--hardware", "h200", "--pp", "2", "--concurrency", "4",
       "--prompt-tokens", "1024", "--quiet"]
SPAWN = ["bench", "--engine", "torch", "--pp", "3", "--launcher", "spawn", "--concurrency", "4",
         "--requests", "100000", "--policy", "wavepp", "--quiet"]


def _start(argv: list[str]) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    # A session of its own: a signal to its group is what Ctrl-C in a terminal sends.
    return subprocess.Popen([str(WAVEPP), *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env, start_new_session=True)


def _finish(proc: subprocess.Popen[str], within_s: float) -> tuple[str, float]:
    t0 = time.monotonic()
    try:
        _, err = proc.communicate(timeout=within_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        pytest.fail(f"still running {within_s} s after the fault")
    return err, time.monotonic() - t0


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_stops_a_virtual_time_run_with_one_line(sig: signal.Signals) -> None:
    """SIGINT (to the group, as Ctrl-C) or SIGTERM mid-run: exit 128+signal, one line, no
    "Task pending" / "Event loop is closed" from tasks outliving their loop."""
    proc = _start([*SIM, "--requests", "1000000"])
    time.sleep(4)
    assert proc.poll() is None
    if sig == signal.SIGINT:
        os.killpg(proc.pid, sig)
    else:
        proc.send_signal(sig)
    err, took = _finish(proc, 15)
    assert proc.returncode == 128 + sig.value, err
    assert err.splitlines() == [f"wavepp: interrupted ({sig.name})"]


def _running_spawn() -> tuple[subprocess.Popen[str], list[int]]:
    proc = _start(SPAWN)
    deadline = time.monotonic() + 120
    stages: list[int] = []
    while len(stages) < 2 and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.2)
        stages = stage_processes(proc.pid)
    assert len(stages) == 2, proc.communicate(timeout=30)
    time.sleep(10)                          # built, primed, running
    assert proc.poll() is None
    return proc, stages


@pytest.mark.parametrize("fault", ["SIGTERM to the leader", "SIGINT to the group", "SIGKILL to a stage",
                                   "SIGKILL to the leader"])
def test_spawned_stages_stop_with_one_line_and_no_orphan(fault: str) -> None:
    """Under --launcher spawn every process of the run ends within seconds of the fault, with one
    line each at most and no traceback (gloo `Connection closed by peer` used to print pages)."""
    proc, stages = _running_spawn()
    if fault == "SIGTERM to the leader":
        proc.send_signal(signal.SIGTERM)
    elif fault == "SIGINT to the group":
        os.killpg(proc.pid, signal.SIGINT)
    elif fault == "SIGKILL to a stage":
        os.kill(stages[-1], signal.SIGKILL)
    else:
        proc.kill()
    err, _ = _finish(proc, 20)
    deadline = time.monotonic() + 10
    while any(alive(s) for s in stages) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(alive(s) for s in stages), "a stage process outlived its run"
    assert "Traceback" not in err, err
    lines = err.splitlines()
    if fault == "SIGTERM to the leader":
        assert (proc.returncode, lines) == (143, ["wavepp: interrupted (SIGTERM)"])
    elif fault == "SIGINT to the group":
        assert (proc.returncode, lines) == (130, ["wavepp: interrupted (SIGINT)"])
    elif fault == "SIGKILL to a stage":
        assert (proc.returncode, lines) == (1, ["wavepp: error: StageDied: stage 2 process was killed by SIGKILL"])
    else:                                   # the leader could not say a word; each stage says one line
        assert sorted(lines) == [f"wavepp: stage {s}: the leader is gone (its link closed), stopping" for s in (1, 2)]


def test_finished_runs_are_written_before_a_later_run_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    """The second run fails: the first run's figures are in --json, and the failure is one line, exit 1."""
    real = bench.run_one
    calls = []

    def second_fails(*args: Any, **kwargs: Any) -> bench.RunRecord:
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("the second run broke\nwith a second line nobody needs")
        return real(*args, **kwargs)

    monkeypatch.setattr(bench, "run_one", second_fails)
    fig = tmp_path / "f.json"
    assert main([*SIM, "--requests", "8", "--json", str(fig)]) == 1
    assert capsys.readouterr().err.splitlines() == ["wavepp: error: RuntimeError: the second run broke"]
    assert [r["policy"] for r in json.loads(fig.read_text())["runs"]] == ["wavepp"]
