"""A store the commands cannot use at start (a wrong password) is one line and exit 2 for every
command that takes ``--store``, as docs/store.md says - `wavepp serve` as `wavepp bench`."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]
COMMANDS = {"serve": ["serve", "--engine", "sim", "--pp", "2", "--kv-blocks", "100", "--port", "0"],
            "bench": ["bench", "--engine", "sim", "--pp", "2", "--kv-blocks", "400", "--requests", "4",
                      "--concurrency", "2", "--quiet"]}


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_wrong_password_is_one_line_and_exit_2(
        start_private_redis: Callable[..., tuple[subprocess.Popen[bytes], int]], command: str) -> None:
    _, port = start_private_redis("--requirepass", "secret")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-m", "wavepp", *COMMANDS[command], "--store",
                           f"redis://:letmein@127.0.0.1:{port}/0"], capture_output=True, text=True, timeout=120,
                          env=env, cwd=ROOT)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2, done.stderr
    assert len(lines) == 1 and "authentication failed" in lines[0] and "letmein" not in done.stderr, lines
