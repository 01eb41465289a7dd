"""The follower of a live source: its newest view is the view of the snapshot read last, so a page that
reads the source right after a restart is not overwritten by a background update that read it before."""

from __future__ import annotations

import threading
import time
from typing import Any

from wavepp.dashboard.follow import Follower


class _Views:
    def view(self, source: Any, snap: Any) -> Any:
        return snap


class _Source:
    """The first snapshot (the runtime that stopped) is read before the restart and returned after it."""

    def __init__(self) -> None:
        self.first = True
        self.release = threading.Event()
        self.reading = threading.Event()

    def snapshot(self, run_id: str | None) -> str:
        if self.first:
            self.first = False
            self.reading.set()
            assert self.release.wait(10)
            return "the runtime that stopped: not answering"
        return "the restarted runtime"


def test_an_update_that_read_the_source_first_never_overwrites_one_that_read_it_after() -> None:
    source = _Source()
    follower = Follower(source, _Views(), every_s=60.0)          # type: ignore[arg-type]
    background = threading.Thread(target=follower.update)     # the follower's own poll, before the restart
    background.start()
    assert source.reading.wait(10)
    page = threading.Thread(target=follower.update)           # the page after the Restart button
    page.start()
    time.sleep(0.2)                                           # time for it to finish first, were it not held
    source.release.set()
    background.join(10)
    page.join(10)
    assert follower.newest == "the restarted runtime"
