"""Keep working through store outages: retry with backoff, rebuild on reconnect.

Wraps any store. A call that fails with :class:`StoreUnavailable` is retried with exponential
backoff (50 ms doubling to 2 s) until it succeeds; meanwhile the caller waits but the rest of
the runtime - stages executing in-flight waves - goes on. The first success after an outage runs
the ``on_reconnect`` callbacks in a task of their own (the runtime rebuilds the hint index from
the stages' own trees, since updates sent during the outage were lost); the call that noticed
the recovery returns at once, so a callback may take locks that caller holds.

With ``deadline_s``, an outage that lasts that long ends the wait: calls raise
:class:`StoreGone` (a benchmark must end, with one line saying why); without it (a long-running
server) they wait for the store to return.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, Protocol, TypeVar, runtime_checkable

from wavepp.store.base import Store, StoreError
from wavepp.store.memory import MemoryStore
from wavepp.store.wrapper import StoreWrapper

log = logging.getLogger(__name__)
T = TypeVar("T")


class StoreUnavailable(StoreError):
    """The server went away or timed out; the call may succeed later."""


class StoreRefused(StoreUnavailable):
    """The server answers but refuses the call for now (out of memory, a read-only replica): retried
    like an outage, counted apart."""


class StoreGone(StoreError):
    """The store stayed unavailable longer than the deadline: the run gives up."""


@runtime_checkable
class PooledStore(Protocol):
    """A store that keeps connections (Redis): after an outage, every one pooled before it may be
    dead - all of them, when the server restarted."""

    async def drop_pooled_connections(self) -> None: ...

    def take_restart(self) -> bool:
        """Whether the server restarted, empty, since the last call (a client that reconnects silently)."""
        ...


class ResilientStore(StoreWrapper):
    """Every call retried through outages (the hook); :meth:`close` lets a rebuild in progress finish."""

    def __init__(self, inner: Store, initial_backoff_s: float = 0.05, max_backoff_s: float = 2.0,
                 deadline_s: float | None = None) -> None:
        super().__init__(inner)
        self.initial_backoff_s = initial_backoff_s
        self.max_backoff_s = max_backoff_s
        self.deadline_s = deadline_s
        self._down_since: float | None = None   # loop time of the first failure of the current outage
        self._back_since = float("-inf")        # loop time the last outage ended
        self.on_reconnect: list[Callable[[], Awaitable[None]]] = []
        self.down = False
        self.outages = 0
        self.rebuilds = 0
        self._rebuilding = False
        self._tasks: set[asyncio.Task[None]] = set()
        # Asked once: an isinstance against a runtime-checkable Protocol walks its members, and every call
        # asks whether the server restarted.
        self._pooled: PooledStore | None = inner if isinstance(inner, PooledStore) else None
        # Every failed attempt, by call and reason (unavailable, refused, error), and whoever counts
        # them (a server's wavepp_store_failures_total): a failed write is never silent.
        self.failures: Counter[tuple[str, str]] = Counter()
        self.on_failure: list[Callable[[str, str], None]] = []

    async def _call(self, name: str, call: Callable[[], Coroutine[Any, Any, T]]) -> T:
        backoff = self.initial_backoff_s
        loop = asyncio.get_running_loop()
        while True:
            started = loop.time()
            try:
                result = await self._bounded(call, started)
            except StoreError as exc:
                self._failed(name, "refused" if isinstance(exc, StoreRefused) else
                             "unavailable" if isinstance(exc, StoreUnavailable) else "error")
                if not isinstance(exc, StoreUnavailable):
                    raise
                task = asyncio.current_task()
                if task is not None and task.cancelling():
                    # The client turned our cancellation into a connection error: never retry
                    # through a cancellation, or the task would outlive its shutdown.
                    raise asyncio.CancelledError from exc
                if not self.down and started >= self._back_since:   # else a call sent during the last outage
                    self.down, self.outages = True, self.outages + 1
                    log.warning("store unavailable, retrying with backoff: %s", exc)
                self._check_deadline(exc, started)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, self.max_backoff_s)
                continue
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                # redis-py may absorb a cancellation that arrives mid-command and finish the
                # command; hand the cancellation back so shutdown is never lost.
                raise asyncio.CancelledError
            if self._down_since is not None and started < self._down_since:
                return result      # sent before the outage began: no sign that the store is back
            self._down_since = None
            if self._pooled is not None and self._pooled.take_restart() and not self.down:
                # The client reconnected to a new server instance without an error: what the store held is
                # gone all the same - an outage, and the rebuild below.
                self.down, self.outages = True, self.outages + 1
                log.warning("store restarted (a new server instance); rebuilding")
            if self.down and not self._rebuilding:
                self._rebuilding = True
                self._back_since = loop.time()
                if self._pooled is not None:
                    # One outage, one rebuild: a connection pooled before the outage that a later
                    # call picked would fail it, taken for another outage.
                    await self._pooled.drop_pooled_connections()
                self._tasks.add(asyncio.create_task(self._reconnected()))
            return result

    def _failed(self, name: str, reason: str) -> None:
        self.failures[name, reason] += 1
        for count in self.on_failure:
            count(name, reason)

    async def _bounded(self, call: Callable[[], Coroutine[Any, Any, T]], started: float) -> T:
        """``call()``, given no longer than what is left of the deadline: a store that stops answering
        (a paused server, a black-holed link) holds a call until the client's socket timeout, and
        the deadline must not wait for that."""
        if self.deadline_s is None or isinstance(self.inner, MemoryStore):    # in-process: it cannot hang
            return await call()
        since = started if self._down_since is None else self._down_since
        left = self.deadline_s - (asyncio.get_running_loop().time() - since)
        try:
            async with asyncio.timeout(max(left, 0.001)):      # no task of its own, unlike wait_for
                return await call()
        except TimeoutError:
            raise StoreUnavailable(f"no answer within {max(left, 0.0):.1f} s") from None

    def _check_deadline(self, exc: StoreUnavailable, started: float) -> None:
        """Past the deadline: StoreGone. An outage began no later than the first failed call was sent."""
        now = asyncio.get_running_loop().time()
        if self._down_since is None:
            self._down_since = started
        if self.deadline_s is not None and now - self._down_since >= self.deadline_s:
            raise StoreGone(f"unreachable for {now - self._down_since:.0f} s (deadline {self.deadline_s:g} s, "
                            f"--store-deadline): {exc}") from None

    async def _reconnected(self) -> None:
        try:
            log.warning("store reachable again; rebuilding")
            for callback in self.on_reconnect:
                await callback()
            self.down = False
        finally:
            self._rebuilding = False
            self.rebuilds += 1

    async def close(self) -> None:
        for task in self._tasks:
            await task
        await self.inner.close()
