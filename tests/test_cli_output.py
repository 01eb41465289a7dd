"""What the ``wavepp`` command prints around its work: ``--verbose`` wherever it is put, ``--quiet``
hiding only the progress bar, a reader of stdout that stops early (``| head -1``), and the one-line
message of a workload form whose number is out of range."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from wavepp.runtime.cli import main

SIM = ["--model", "llama-3-8b", "--hardware", "h200", "--pp", "2", "--concurrency", "2", "--requests", "4",
       "--prompt-tokens", "1024", "--policy", "wavepp"]


@pytest.mark.parametrize("argv", [
    ["trace", "export", "/nonexistent/run.json.gz", "--out", "/dev/null", "--verbose"],
    ["trace", "--verbose", "export", "/nonexistent/run.json.gz", "--out", "/dev/null"],
    ["--verbose", "trace", "export", "/nonexistent/run.json.gz", "--out", "/dev/null"],
])
def test_verbose_is_taken_before_or_after_a_nested_command(argv: list[str],
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    """docs/bench-and-grid.md: ``--verbose`` on any command, before or after it - ``trace export`` too."""
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "unrecognized arguments" not in err and "Traceback" in err, err     # the run's error, with its traceback
    assert err.splitlines()[-1].startswith("wavepp: error: ") and "/nonexistent/run.json.gz" in err


def test_quiet_hides_the_progress_bar_not_the_cost_model_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", *SIM, "--quiet"]) == 0
    assert "sim cost model: analytic" in capsys.readouterr().out


@pytest.mark.parametrize(("workload", "says"), [
    ("sessions:0", "sessions:N needs a number of conversations in [1, 1000000]"),
    ("sessions:2000000", "sessions:N needs a number of conversations in [1, 1000000]"),
    ("suffix:0", "suffix:N needs a number of suffix tokens of at least 1"),
])
def test_a_known_workload_form_out_of_range_says_its_range(workload: str, says: str,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "--workload", workload]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and workload in err[0] and says in err[0] and "unknown" not in err[0], err


@pytest.mark.parametrize("argv", [
    ["cost-table", "--model", "glm-5.2", "--hardware", "b300", "--pp", "4"],
    ["knobs", "--store", "redis://127.0.0.1:6379/13?cluster=test-cli-output-pipe"],
])
def test_a_reader_that_stops_early_ends_the_command_quietly(argv: list[str]) -> None:
    """``wavepp knobs … | head -1``: stdout's reader gone, the command stops as a tool killed by
    SIGPIPE does (exit 141) and says nothing - no BrokenPipeError."""
    read, write = os.pipe()
    os.close(read)                          # the reader is gone before the first line
    try:
        done = subprocess.run([sys.executable, "-m", "wavepp", *argv], stdout=write, stderr=subprocess.PIPE,
                              text=True, timeout=120)
    finally:
        os.close(write)
    assert done.returncode == 141 and done.stderr == "", (done.returncode, done.stderr)
