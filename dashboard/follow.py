"""A live source's newest view, kept derived in the background.

A page that opens on a live run would otherwise fold in every span the run produced since the
last page looked - at the embedded sim demo's ~2,000 spans a second, tens of seconds of work
before its first chart. The follower takes the new spans every ``every_s`` whether or not a page
is open, so an update costs the spans of one interval and a page finds its view ready: a page on
the newest run draws :attr:`Follower.newest` and never reads the source itself (a page or watcher
that polled too would decode the same spans again and wait on the follower's lock).
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field

from wavepp.dashboard.sources import Source
from wavepp.dashboard.view import View, ViewCache

log = logging.getLogger(__name__)


@dataclass
class Follower:
    source: Source
    views: ViewCache
    every_s: float = 1.0
    spec: str = ""                       # the dashboard's source spec (``store:URL``), when it matters
    newest: View | None = None           # the newest run's view as of the last update (None: none yet)
    _stop: threading.Event = field(default_factory=threading.Event)
    _updating: threading.Lock = field(default_factory=threading.Lock)

    def start(self) -> Follower:
        threading.Thread(target=self._run, name="wavepp-follow", daemon=True).start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def update(self) -> View:
        """Fold in the newest run's new spans now; answers its view (also kept as :attr:`newest`). One update
        at a time, so :attr:`newest` is the view of the snapshot read last: a page that reads the source now
        (after a restart) is never overwritten by the background update that read it before."""
        with self._updating:
            self.newest = self.views.view(self.source, self.source.snapshot(None))
            return self.newest

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            try:
                self.update()
            except Exception:            # noqa: BLE001 - a page shows the source's error; the follower goes on
                log.exception("dashboard follower")


FOLLOWED: Follower | None = None       # set by `wavepp dashboard` for its live source, before the server starts
