"""`wavepp serve` settings: flag, else WAVEPP_* variable, else default; bad values are one line; every
variable is documented on the serve page (docs/serve.md)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from wavepp.runtime.serve.config import OPTIONS, resolve

SERVE_DOC = (Path(__file__).resolve().parents[2] / "docs" / "serve.md").read_text()


def test_a_flag_wins_over_its_variable_which_wins_over_the_default() -> None:
    settings = resolve({"pp": 3, "port": None}, {"WAVEPP_PP": "5", "WAVEPP_PORT": "9001", "WAVEPP_STORE": ""})
    assert settings["pp"] == 3 and settings["port"] == 9001 and settings["store"] == "memory"
    assert resolve({}, {"WAVEPP_KV_BLOCKS": "100,200"})["kv_blocks"] == [100, 200]


@pytest.mark.parametrize(("env", "value", "why"), [
    ("WAVEPP_PP", "0", "must be >= 1, got 0"),
    ("WAVEPP_PORT", "70000", "not a TCP port"),
    ("WAVEPP_ENGINE", "tpu", "one of torch, sim"),
    ("WAVEPP_DRAIN_S", "inf", "finite"),
])
def test_a_bad_variable_is_refused_naming_it(env: str, value: str, why: str) -> None:
    with pytest.raises(ValueError, match=f"^{env}: .*{why}"):
        resolve({}, {env: value})


def test_the_cli_refuses_bad_settings_in_one_line_with_exit_2() -> None:
    done = subprocess.run([sys.executable, "-m", "wavepp", "serve", "--engine", "sim", "--policy", "nope"],
                          capture_output=True, text=True, timeout=60, env={"PATH": "/usr/bin:/bin"})
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "wavepp: error: policy:" in done.stderr
    done = subprocess.run([sys.executable, "-m", "wavepp", "serve"], capture_output=True, text=True,
                          timeout=60, env={"PATH": "/usr/bin:/bin", "WAVEPP_MAX_QUEUE": "-3"})
    assert done.returncode == 2 and done.stderr.strip() == (
        "wavepp: error: WAVEPP_MAX_QUEUE: must be >= 1, got -3")


def test_every_setting_is_documented_with_its_variable() -> None:
    for opt in OPTIONS:
        assert f"| `{opt.flag}` | `{opt.env}` |" in SERVE_DOC, f"{opt.env} is not documented in docs/serve.md"


@pytest.mark.parametrize(("flag", "env", "value"), [
    ("--pp", "WAVEPP_PP", "0"), ("--port", "WAVEPP_PORT", "70000"), ("--time-scale", "WAVEPP_TIME_SCALE", "inf"),
    ("--kv-blocks", "WAVEPP_KV_BLOCKS", "10,abc"),
])
def test_a_bad_value_reads_the_same_as_a_flag_of_any_command_and_as_a_variable(flag: str, env: str,
                                                                                value: str) -> None:
    """One set of parsers (runtime/control/values.py): wavepp bench's flag, wavepp serve's flag and its variable."""
    with pytest.raises(ValueError) as from_env:
        resolve({}, {env: value})
    said = str(from_env.value).removeprefix(f"{env}: ")
    bench_flag = {"--port": "--metrics-port"}.get(flag, flag)
    for argv in (["bench", bench_flag, value], ["serve", flag, value]):
        err = subprocess.run([sys.executable, "-m", "wavepp", *argv], capture_output=True, text=True, timeout=60)
        assert err.returncode == 2 and err.stderr.strip().endswith(said), (argv, err.stderr)
