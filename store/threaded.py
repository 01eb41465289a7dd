"""Run an async store on its own event loop in a background thread; each call blocks the caller.

The virtual-time sim uses this for Redis: a real network round trip must take *no* virtual time
(the sim charges the measured round-trip time itself), and the virtual loop must not jump ahead
while a reply is on its way. So the call blocks the sim's loop until the reply is in.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from wavepp.store.base import Store
from wavepp.store.wrapper import StoreWrapper

T = TypeVar("T")


class ThreadedStore(StoreWrapper):
    """The store ``open_store()`` opens, on a loop of its own in the ``store-io`` thread."""

    def __init__(self, open_store: Callable[[], Coroutine[Any, Any, Store]]) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="store-io", daemon=True)
        self._thread.start()
        try:
            super().__init__(self._run(open_store()))
        except BaseException:
            self._stop()
            raise

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on the store's loop and block until it is done (the caller's loop included)."""
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    async def _call(self, name: str, call: Callable[[], Coroutine[Any, Any, T]]) -> T:
        return self._run(call())

    async def close(self) -> None:
        try:
            self._run(self.inner.close())
        finally:
            self._stop()

    def _stop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)
        self._loop.close()
