"""What a Redis error means to the store's callers: :func:`translated` wraps each of the Redis store's calls.
Connection trouble is an outage (StoreUnavailable), a server refusing writes for now is StoreRefused (both
retried by store.resilient), any other error reply one line (StoreError)."""

from __future__ import annotations

import re
from collections.abc import Callable, Coroutine
from functools import wraps
from typing import Any, Concatenate, ParamSpec, Protocol, TypeVar, cast

from redis import exceptions as rex

from wavepp.store.base import StoreError
from wavepp.store.redis_connect import first_line
from wavepp.store.resilient import StoreRefused, StoreUnavailable
from wavepp.store.urls import StoreUrl

T = TypeVar("T")
P = ParamSpec("P")


class Healable(Protocol):
    url: StoreUrl

    async def heal(self) -> bool:
        """Delete keys of the wrong Redis type (reported once); whether any were."""
        ...


S = TypeVar("S", bound=Healable)


# Error replies of a server that refuses a call for now and may take it later: out of memory under
# ``noeviction`` (OOM), a replica (READONLY), a failed snapshot that stops writes (MISCONF), too few
# replicas (NOREPLICAS), a replica cut from its master (MASTERDOWN), a slot in migration (TRYAGAIN).
_REFUSED = (rex.OutOfMemoryError, rex.ReadOnlyError, rex.MasterDownError, rex.TryAgainError)
_REFUSED_CODES = re.compile(r"\b(MISCONF|NOREPLICAS)\b")    # no class of their own in redis-py


def _refused(exc: rex.ResponseError) -> bool:
    return isinstance(exc, _REFUSED) or _REFUSED_CODES.search(str(exc)) is not None


def translated(fn: Callable[Concatenate[S, P], Coroutine[Any, Any, T]]
               ) -> Callable[Concatenate[S, P], Coroutine[Any, Any, T]]:
    """Connection trouble becomes StoreUnavailable, a server refusing the call for now (out of
    memory, a replica, ...) StoreRefused: both retryable. A key of the wrong Redis type (another
    client wrote it) is healed - deleted, reported once - and the call retried once; any other error
    reply becomes a one-line StoreError."""
    @wraps(fn)
    async def wrapper(self: S, *args: P.args, **kwargs: P.kwargs) -> T:
        try:
            try:
                return await fn(self, *args, **kwargs)
            except rex.ResponseError as exc:
                if _refused(exc):
                    raise StoreRefused(f"redis at {self.url.where} refuses writes for now: "
                                       f"{first_line(exc)[:300]}") from None
                if "WRONGTYPE" not in str(exc) or not await self.heal():
                    raise StoreError(f"redis at {self.url.where}: {first_line(exc)}") from None
                return await fn(self, *args, **kwargs)
        except (rex.ConnectionError, rex.TimeoutError, ConnectionError, TimeoutError, OSError) as exc:
            raise StoreUnavailable(f"redis unavailable: {exc}") from exc
        except rex.ResponseError as exc:        # the retry after healing failed too
            raise StoreError(f"redis at {self.url.where}: {first_line(exc)}") from None
    return cast("Callable[Concatenate[S, P], Coroutine[Any, Any, T]]", wrapper)   # wraps() keeps it
