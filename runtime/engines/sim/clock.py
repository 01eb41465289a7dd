"""Virtual time for asyncio: when nothing is ready, jump to the next timer.

The runtime's coroutines only wait on the loop's clock (``asyncio.sleep``) or on each other
(queues, events). On a :class:`VirtualTimeLoop` ``loop.time()`` is virtual: whenever the loop
would block in ``select()`` with a timeout, the selector returns at once and virtual time
advances by that timeout. No real sleeping happens, and a run is deterministic for a seed
(callbacks run in the order asyncio schedules them; nothing depends on wall time).

The same coroutines run unchanged on an ordinary event loop on real engines.
"""

from __future__ import annotations

import asyncio
import selectors
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class _NoWaitSelector(selectors.DefaultSelector):
    """A real selector (the loop's self-pipe still works) that never blocks: it advances time."""

    def __init__(self) -> None:
        super().__init__()
        self.loop: VirtualTimeLoop | None = None

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        events = super().select(0)
        if events or self.loop is None:
            return events
        if timeout is None:
            # Nothing scheduled and nothing ready: in virtual time this is a deadlock.
            raise RuntimeError("virtual-time loop has nothing to wait for (deadlock)")
        if timeout > 0:
            self.loop._now += timeout
        return events


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    """An asyncio loop whose clock is virtual and starts at 0."""

    def __init__(self) -> None:
        selector = _NoWaitSelector()
        super().__init__(selector)
        selector.loop = self
        self._now = 0.0
        # Timers closer than this are treated as due: keep it tiny so virtual time is exact.
        self._clock_resolution = 1e-12

    def time(self) -> float:
        return self._now


def run_virtual(main: Coroutine[Any, Any, T]) -> T:
    """Run ``main`` to completion in virtual time (like ``asyncio.run``).

    Through :class:`asyncio.Runner`, so Ctrl-C (or an exception a signal handler raises) cancels
    every task and lets it finish before the loop closes: no "Task was destroyed but it is
    pending" and no "Event loop is closed" from tasks that outlived their loop.
    """
    with asyncio.Runner(loop_factory=VirtualTimeLoop) as runner:
        return runner.run(main)
