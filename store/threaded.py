"""Run an async store on its own event loop in a background thread; each call blocks the caller.

The virtual-time sim uses this for Redis: a real network round trip must take *no* virtual time
(the sim charges the measured round-trip time itself), and the virtual loop must not jump ahead
while a reply is on its way. So the call blocks the sim's loop until the reply is in.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable
from typing import Any


class ThreadedStore:
    def __init__(self, open_store: Callable[[], Awaitable[Any]]) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="store-io", daemon=True)
        self._thread.start()
        try:
            self.inner = self._call(open_store())
        except BaseException:
            self._stop()
            raise

    def _call(self, coro: Awaitable[Any]) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()  # type: ignore[arg-type]

    def __getattr__(self, name: str) -> Any:
        target = getattr(self.inner, name)
        if not asyncio.iscoroutinefunction(target):
            return target

        async def call(*args: Any, **kwargs: Any) -> Any:
            return self._call(target(*args, **kwargs))

        return call

    async def close(self) -> None:
        try:
            self._call(self.inner.close())
        finally:
            self._stop()

    def _stop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)
        self._loop.close()
