"""The demo previews out of the box: ``wavepp dashboard`` on the embedded torch runtime without a
``--cost-profile`` uses this machine's calibration from the cache, or makes one in the background
(``wavepp calibrate``, the same code and model), so Preview and Suggest work without a manual step.

A calibration is a fixed amount of CPU work (:data:`TYPICAL`); its wall time is that work over the
share of the cores it gets. It shares them with the running demo, so it is measured under the
demo's own load (the preview anchors its predictions on what the run did, which takes the scale
out). Until it ends, the Knobs page says so and for how long it has run; if it fails, the page says
why (its last line).

``wavepp calibrate --out`` names the profile's own path (its log's ``use:`` line then names the file
that stays): the command writes beside it and moves it into place when complete
(:func:`runtime.cli.args.write_output`), so a half-written file is never read as a profile.
"""

from __future__ import annotations

import atexit
import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

PROFILE_ENV = "WAVEPP_COST_PROFILE"       # the profile the page replays a torch run with
STARTED_ENV = "WAVEPP_CALIBRATING_SINCE"  # epoch seconds: a background calibration started then
CACHE_ENV = "WAVEPP_CACHE"                # where calibrations are kept (default ~/.cache/wavepp)
# tiny-llama, PP2, the default grid: 174 s user + 10 s system measured (`/usr/bin/time -v wavepp calibrate
# --model tiny-llama --pp 2 --out F`), 10.4 min of wall time at 29 % of a core on 2 cores at load average 10-17
TYPICAL = "about 3 CPU-minutes: 1.5 minutes on 2 idle cores, more the busier they are"


def cache_dir() -> Path:
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "wavepp")


def profile_path(model: str, pp: int, block_size: int) -> Path:
    """Where this machine's calibration of ``model`` on ``pp`` stages is kept."""
    return cache_dir() / f"calibration-{model}-pp{pp}-b{block_size}.json"


def failure_path(profile: Path) -> Path:
    return profile.with_name(profile.name + ".failed")


@dataclass(frozen=True, slots=True)
class Calibration:
    path: Path
    started: bool                 # False: the cached profile is used as it is


def ensure(model: str, pp: int, block_size: int) -> Calibration:
    """The profile for the embedded runtime: the cached one, else a ``wavepp calibrate`` started in
    the background that writes it. Sets the page's environment (``PROFILE_ENV``, ``STARTED_ENV``)."""
    path = profile_path(model, pp, block_size)
    os.environ[PROFILE_ENV] = str(path)
    if path.is_file():
        return Calibration(path, False)
    path.parent.mkdir(parents=True, exist_ok=True)
    failure_path(path).unlink(missing_ok=True)
    log = path.with_name(path.name + ".log")
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "wavepp", "calibrate", "--model", model, "--pp", str(pp),
                                 "--block-size", str(block_size), "--out", str(path)],
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    atexit.register(_stop, proc)
    os.environ[STARTED_ENV] = f"{time.time():.0f}"
    threading.Thread(target=_finish, args=(proc, path, log), daemon=True,
                     name="wavepp-calibration").start()
    return Calibration(path, True)


def _finish(proc: subprocess.Popen[bytes], path: Path, log: Path) -> None:
    code = proc.wait()
    if code == 0 and path.is_file():
        return
    lines = [ln for ln in log.read_text(errors="replace").splitlines() if ln.strip()] if log.is_file() else []
    # written whole, then renamed: the page polls for the file and must never read it half-written
    failed = failure_path(path)
    draft = failed.with_name(failed.name + ".partial")
    draft.write_text(f"exit {code}: {lines[-1] if lines else 'no output'} (log: {log})")
    os.replace(draft, failed)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()


def pending() -> str | None:
    """What the page says while the background calibration runs or after it failed; None when there
    is none, or its profile is ready."""
    path, since = os.environ.get(PROFILE_ENV), os.environ.get(STARTED_ENV)
    if not path or not since or Path(path).is_file():
        return None
    failed = failure_path(Path(path))
    if failed.is_file():
        return f"The background calibration of this machine failed ({failed.read_text().strip()}): run " \
               f"`wavepp calibrate --out FILE` and restart with --cost-profile FILE."
    return (f"Preview and Suggest replay this torch run in the simulator calibrated to this machine: the "
            f"calibration has been running in the background for {time.time() - float(since):.0f} s "
            f"({TYPICAL}, and the demo beside it shares them); they work as soon as it ends.")
