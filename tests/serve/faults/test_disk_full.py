"""A full disk under every output the CLI writes (every option of type ``output_file``): the command
ends in one line naming the file and the cause (exit 1), its figures are still printed, its other
outputs are still written, and no half-written file is left. A tmpfs of 64 KiB, filled, stands for
the full disk (mounting it needs root; without it the test says so and is skipped)."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from wavepp.runtime.cli import build_parser
from wavepp.runtime.cli.args import output_file

SIM = ["--model", "llama-3-8b", "--hardware", "h200", "--pp", "2"]
BENCH = ["bench", *SIM, "--concurrency", "4", "--requests", "16", "--prompt-tokens", "1024", "--quiet"]
GRID = ["grid", "--models", "llama-3-8b", "--hardware", "h200", "--pp", "2", "--workloads", "suffix4k",
        "--concurrency", "4", "--policy", "wavepp,trtllm-pp", "--requests", "16", "--quiet"]
RUN = "{run}"          # a saved run (written once, on a disk with room)

# (command, option): the command line, with FULL where the option's file goes.
CASES: dict[tuple[str, str], list[str]] = {
    ("bench", "--json"): [*BENCH, "--json", "FULL"],
    ("bench", "--trace"): [*BENCH, "--trace", "FULL"],
    ("bench", "--save-run"): [*BENCH, "--save-run", "FULL"],
    ("grid", "--json"): [*GRID, "--json", "FULL"],
    ("grid", "--markdown"): [*GRID, "--markdown", "FULL"],
    ("admission-bench", "--json"): ["admission-bench", "--store", "memory", "--stages", "2", "--prompt-tokens",
                                    "4096", "--requests", "10", "--json", "FULL"],
    ("calibrate", "--out"): ["calibrate", "--pp", "2", "--max-wave-tokens", "128", "--kv-memory-mb", "16",
                             "--out", "FULL"],
    ("calibrate-coordination", "--json"): ["calibrate-coordination", "--prompt-tokens", "2048", "--json", "FULL"],
    ("trace export", "--out"): ["trace", "export", RUN, "--out", "FULL"],
    ("preview", "--json"): ["preview", RUN, "--set", "ring=2", "--time-limit", "20", "--json", "FULL"],
    ("suggest", "--json"): ["suggest", RUN, "--time-limit", "5", "--json", "FULL"],
}


def _outputs(parser: argparse.ArgumentParser, prefix: str = "") -> Iterator[tuple[str, str]]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _outputs(sub, f"{prefix} {name}".strip())
        elif action.type is output_file:
            yield prefix, action.option_strings[-1]


def test_every_output_of_the_cli_has_a_disk_full_case() -> None:
    assert set(_outputs(build_parser())) == set(CASES)


@pytest.fixture(scope="module")
def full_disk(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    where = tmp_path_factory.mktemp("full")
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(where)], capture_output=True,
                          text=True)
    if made.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs to fill (needs root): {made.stderr.strip()}")
    try:
        fd = os.open(where / "filler", os.O_WRONLY | os.O_CREAT)
        try:
            while os.write(fd, b"\0" * 512):
                pass
        except OSError:                 # ENOSPC: full
            pass
        finally:
            os.close(fd)
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


@pytest.fixture(scope="module")
def saved_run(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("run") / "run.json.gz"
    subprocess.run([sys.executable, "-m", "wavepp", *BENCH, "--policy", "wavepp", "--save-run", str(path)],
                   check=True, capture_output=True)
    return str(path)


@pytest.mark.parametrize("case", list(CASES), ids=[" ".join(c) for c in CASES])
def test_disk_full(case: tuple[str, str], full_disk: Path, saved_run: str, tmp_path: Path, fault: Any) -> None:
    """Disk full"""
    target = full_disk / f"out-{case[1].strip('-')}{'.json.gz' if case[1] == '--save-run' else ''}"
    argv = [saved_run if a == RUN else str(target) if a == "FULL" else a for a in CASES[case]]
    env = {**os.environ, "HOME": str(tmp_path), "XDG_CACHE_HOME": str(tmp_path)}
    fault.inject()
    done = subprocess.run([sys.executable, "-m", "wavepp", *argv], capture_output=True, text=True, env=env,
                          timeout=300)
    fault.detect("one line, exit 1")
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 1, done.stderr
    assert len(lines) == 1 and lines[0] == f"wavepp: error: cannot write {str(target)!r}: No space left on device", \
        done.stderr
    assert not target.exists() and [p.name for p in full_disk.iterdir()] == ["filler"]   # nothing half-written
    if case[0] in ("bench", "grid", "admission-bench", "calibrate-coordination"):
        assert done.stdout.strip(), "the figures are still printed"
    # Recovered: the same command on a disk with room writes the file whole.
    fault.clear()
    roomy = tmp_path / target.name
    again = subprocess.run([sys.executable, "-m", "wavepp", *[str(roomy) if a == str(target) else a for a in argv]],
                           capture_output=True, text=True, env=env, timeout=300)
    assert again.returncode == 0, again.stderr
    assert roomy.stat().st_size > 0
    fault.recover("the same command on a disk with room")


def test_an_output_that_cannot_be_written_costs_no_other(full_disk: Path, tmp_path: Path) -> None:
    """bench with --trace on the full disk and --json and --save-run on one with room: both written."""
    trace = full_disk / "trace.json"
    argv = [*BENCH, "--trace", str(trace), "--json", str(tmp_path / "b.json"),
            "--save-run", str(tmp_path / "r.json.gz")]
    done = subprocess.run([sys.executable, "-m", "wavepp", *argv], capture_output=True, text=True, timeout=300)
    assert done.returncode == 1
    assert done.stderr.strip() == f"wavepp: error: cannot write {str(trace)!r}: No space left on device"
    assert json.loads((tmp_path / "b.json").read_text())["runs"] and (tmp_path / "r.json.gz").stat().st_size > 0
    assert f"wrote {tmp_path / 'b.json'}" in done.stdout and not trace.exists()
