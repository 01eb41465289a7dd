"""A broadcast wake-up for coroutines: ``await wake.wait()`` returns after the next ``notify()``."""

from __future__ import annotations

import asyncio


class Wakeup:
    def __init__(self) -> None:
        self._event = asyncio.Event()

    def notify(self) -> None:
        self._event.set()
        self._event = asyncio.Event()

    async def wait(self) -> None:
        await self._event.wait()
