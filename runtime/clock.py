"""The runtime's time: the running event loop's clock (virtual on the sim engine, monotonic on real ones), its
sleep, and the broadcast wake-up its coroutines wait on."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable


def now() -> float:
    """The runtime clock: the running event loop's time (virtual on the sim engine)."""
    return asyncio.get_running_loop().time()


def sleep(delay: float) -> Awaitable[None]:
    """``asyncio.sleep(delay)``, for the runtime's modelled costs and polls: on the sim's lean loop its own
    timer (:meth:`runtime.engines.sim.lean_loop.LeanScheduling.lean_sleep`), made in one step, in the same
    order."""
    if delay > 0:
        lean = getattr(asyncio.get_running_loop(), "lean_sleep", None)
        if lean is not None:
            return lean(delay)      # type: ignore[no-any-return]
    return asyncio.sleep(delay)


class Wakeup:
    """``await wake.wait()`` returns after the next ``notify()``."""

    def __init__(self) -> None:
        self._event = asyncio.Event()

    def notify(self) -> None:
        self._event.set()
        self._event = asyncio.Event()

    async def wait(self) -> None:
        await self._event.wait()
