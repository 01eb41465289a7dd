"""The runtime's time: the running event loop's clock (virtual on the sim engine, monotonic on real ones), and
the broadcast wake-up its coroutines wait on."""

from __future__ import annotations

import asyncio


def now() -> float:
    """The runtime clock: the running event loop's time (virtual on the sim engine)."""
    return asyncio.get_running_loop().time()


class Wakeup:
    """``await wake.wait()`` returns after the next ``notify()``."""

    def __init__(self) -> None:
        self._event = asyncio.Event()

    def notify(self) -> None:
        self._event.set()
        self._event = asyncio.Event()

    async def wait(self) -> None:
        await self._event.wait()
