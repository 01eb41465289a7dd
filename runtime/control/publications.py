"""What a run publishes to its store when it starts, as one list it publishes again.

A store that comes back empty (Redis restarted without persistence) has lost all of it: the run's
description and label (what a viewer lists the run by and replays it from), the deployment and the
knobs. The loop publishes the list when it starts and hands :meth:`Publications.republish` to a
:class:`store.resilient.ResilientStore` as a reconnect hook, so what comes back after a restart is
what was published at start, by construction: a new publication is one more entry in the list.
(The hint index and the status are republished by their own writers: the index is rebuilt from the
stages' trees, the status is written every 250 ms.)
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from wavepp.store.resilient import StoreGone

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Publication:
    what: str                                   # for a log line: "the run's description"
    publish: Callable[[], Awaitable[object]]    # idempotent: it writes what the runtime holds now


class Publications:
    def __init__(self, items: Sequence[Publication]) -> None:
        self.items = list(items)
        self.republished = 0                    # times the whole list went out again (tests, logs)

    async def publish(self) -> None:
        """At start, in order: a failure is the run's (the store cannot be used)."""
        for item in self.items:
            await item.publish()

    async def republish(self) -> None:
        """After the store came back: every item again. One that fails is logged and the others still
        go out - a reconnect hook that stopped at the first failure would leave the rest lost."""
        for item in self.items:
            try:
                await item.publish()
            except StoreGone:                   # the store is not coming back: the run ends anyway
                raise
            except Exception as exc:            # noqa: BLE001 - reported; the runtime goes on
                log.warning("store back: could not publish %s again: %s", item.what, exc)
        self.republished += 1
