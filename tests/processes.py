"""Process helpers the fault tests share (imported as ``tests.processes``): a leader's spawned
stage processes and whether a process still lives, read from Linux ``/proc``."""

from __future__ import annotations

import os
from pathlib import Path


def stage_processes(leader: int) -> list[int]:
    """The leader's spawned stage processes (not multiprocessing's resource tracker)."""
    out = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == leader and b"spawn_main" in cmdline \
                and b"resource_tracker" not in cmdline:
            out.append(int(pid))
    return sorted(out)


def alive(pid: int) -> bool:
    """Running or stopped, not a zombie."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False
