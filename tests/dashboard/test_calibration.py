"""The demo previews out of the box: the embedded torch dashboard uses this
machine's cached calibration, or makes one in the background with `wavepp calibrate`, and the Knobs
page says it is running (and for how long) instead of "no calibration"."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from wavepp.dashboard import calibration
from wavepp.dashboard.screens import whatif


class FakeCalibrate:
    """``wavepp calibrate`` as Popen starts it: records its command line, writes the profile it was
    asked for (``exit_code`` 0) or fails."""

    calls: list[list[str]] = []

    def __init__(self, argv: list[str], **_: Any) -> None:
        FakeCalibrate.calls.append(argv)
        self.out = Path(argv[argv.index("--out") + 1])
        self.code: int | None = None

    def wait(self, timeout: float | None = None) -> int:
        time.sleep(0.2)
        self.out.write_text('{"format": "fake"}')
        self.code = 0
        return 0

    def poll(self) -> int | None:
        return self.code

    def terminate(self) -> None:
        self.code = -15

    kill = terminate


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(calibration.CACHE_ENV, str(tmp_path))
    for name in (calibration.PROFILE_ENV, calibration.STARTED_ENV):   # ensure() sets them: undone after the test
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)
    FakeCalibrate.calls = []
    monkeypatch.setattr(calibration.subprocess, "Popen", FakeCalibrate)
    return tmp_path


def test_a_missing_profile_is_made_in_the_background_then_used(cache: Path) -> None:
    made = calibration.ensure("tiny-llama", 2, 64)
    assert made.started and made.path == cache / "calibration-tiny-llama-pp2-b64.json"
    [argv] = FakeCalibrate.calls
    assert argv[:3] == [sys.executable, "-m", "wavepp"] and argv[3] == "calibrate"
    assert argv[argv.index("--model") + 1] == "tiny-llama" and argv[argv.index("--pp") + 1] == "2"
    assert os.environ[calibration.PROFILE_ENV] == str(made.path)
    assert "running in the background for" in (calibration.pending() or "")
    deadline = time.monotonic() + 10
    while not made.path.is_file() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert made.path.is_file() and calibration.pending() is None          # moved into place when complete
    again = calibration.ensure("tiny-llama", 2, 64)
    assert not again.started and len(FakeCalibrate.calls) == 1               # the cached profile is used


def test_a_failed_calibration_says_why(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(FakeCalibrate, "wait", lambda self, timeout=None: 3)
    made = calibration.ensure("tiny-llama", 2, 64)
    deadline = time.monotonic() + 10
    while not calibration.failure_path(made.path).is_file() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert "background calibration of this machine failed (exit 3" in (calibration.pending() or "")


def test_the_knobs_page_says_the_calibration_is_running(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A torch run while its calibration runs: the page says so and for how long, and replays nothing
    (it said "no calibration ... make a profile with wavepp calibrate")."""
    monkeypatch.setenv(calibration.PROFILE_ENV, str(cache / "calibration-tiny-llama-pp2-b64.json"))
    monkeypatch.setenv(calibration.STARTED_ENV, f"{time.time() - 42:.0f}")
    monkeypatch.setattr(whatif, "inputs", lambda *a: pytest.fail("replayed without a profile"))
    shown: list[str] = []
    monkeypatch.setattr(whatif.st, "info", shown.append)
    got = whatif._inputs(None, {"engine": "torch"}, {"profile": os.environ[calibration.PROFILE_ENV]})  # type: ignore[arg-type]
    assert got is None and len(shown) == 1 and "has been running in the background for 4" in shown[0], shown


def test_the_logs_use_hint_names_the_profile_that_stays(cache: Path) -> None:
    """The calibration's log ends with ``wrote FILE (use: … --cost-profile FILE)``, FILE its ``--out``
    (runtime/cli/calibrate.py): that must be the profile the dashboard keeps, not a temporary name
    that is gone once the calibration ends."""
    made = calibration.ensure("tiny-llama", 2, 64)
    deadline = time.monotonic() + 10
    while not made.path.is_file() and time.monotonic() < deadline:
        time.sleep(0.05)
    [argv] = FakeCalibrate.calls
    hinted = Path(argv[argv.index("--out") + 1])
    assert hinted == made.path and hinted.is_file()
    assert [p.name for p in cache.iterdir() if p.name.endswith(".partial")] == []
