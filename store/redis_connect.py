"""Connecting to Redis: a redis-py asyncio client for a store URL, checked with a PING, every
failure turned into one line (:class:`store.base.StoreError`) that says what most likely went wrong -
the server unreachable, the credentials refused, a TLS port spoken to in plain text (or the reverse),
a certificate the client does not trust, or a server that is not Redis at all.

TLS settings travel in the URL (``rediss://…?ssl_ca_certs=PATH&ssl_cert_reqs=required``, checked by
:mod:`store.urls`), so redis-py reads them and every client made from ``StoreUrl.url`` trusts the same CA.
"""

from __future__ import annotations

import asyncio

import redis.asyncio as aioredis
from redis import exceptions as rex
from redis.asyncio.connection import AbstractConnection
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from wavepp.store.base import StoreError
from wavepp.store.urls import StoreUrl

AUTH_FAILED = "authentication failed (wrong user or password)"


async def connect_client(url: StoreUrl, timeout_s: float, watch: RestartWatch | None = None) -> aioredis.Redis:
    """A client for ``url`` that answered PING; StoreError (one line, no password) otherwise. ``watch``: told
    of every (re)connect, it sees the server restart."""
    # One immediate retry inside the client (a pooled connection the server dropped), no more: a server that is
    # down must surface at once to the store above, which backs off (store.resilient). redis-py 8's default -
    # 10 retries, backing off to 1 s - holds a call about 4 s before anyone knows.
    client = aioredis.Redis.from_url(url.url, socket_connect_timeout=timeout_s, socket_timeout=5.0,
                                     retry=Retry(NoBackoff(), 1),
                                     redis_connect_func=None if watch is None else watch.on_connect)
    try:
        await _ping(client)
    except rex.AuthenticationError:
        await client.aclose()
        raise StoreError(f"redis at {url.where}: {AUTH_FAILED}") from None
    except rex.ResponseError as exc:
        await client.aclose()
        if "WRONGPASS" in str(exc) or "NOAUTH" in str(exc):
            raise StoreError(f"redis at {url.where}: {AUTH_FAILED}") from None
        raise StoreError(f"redis at {url.where}: {exc}") from None
    except (rex.ConnectionError, rex.TimeoutError, OSError) as exc:
        await client.aclose()
        raise StoreError(f"cannot reach redis at {url.where}: {exc}{_tls_hint(url, exc)}") from None
    except rex.RedisError as exc:          # e.g. an HTTP server answered: InvalidResponse
        await client.aclose()
        raise StoreError(f"{url.where} is not a Redis server (it answered: {first_line(exc)})") from None
    return client


class RestartWatch:
    """Runs on every (re)connect of one client's connections (redis-py's ``redis_connect_func``): the usual
    handshake, then the server's ``run_id`` (``INFO server``; a new one each time a server starts). redis-py
    reconnects a pooled connection the server dropped before using it again, silently: a restart that emptied
    the store would raise nothing. A connection that finds another ``run_id`` than the first one learned marks a
    restart, which :meth:`take` hands to the store above once (store.resilient: an outage, then the rebuild)."""

    def __init__(self) -> None:
        self.run_id: str | None = None
        self._restarted = False

    async def on_connect(self, conn: AbstractConnection) -> None:
        await conn.on_connect()
        await conn.send_command("INFO", "server")
        try:
            info = await conn.read_response()
        except rex.ResponseError:        # a user the server's ACL denies INFO: nothing to compare
            return
        text = info.decode(errors="replace") if isinstance(info, bytes) else str(info)
        run_id = next((line.partition(":")[2].strip() for line in text.splitlines()
                       if line.startswith("run_id:")), None)
        if run_id is None:               # a server that does not say (a proxy): nothing to compare either
            return
        if self.run_id is not None and run_id != self.run_id:
            self._restarted = True
        self.run_id = run_id

    def take(self) -> bool:
        """Whether a restart was seen since the last call."""
        restarted, self._restarted = self._restarted, False
        return restarted


def _tls_hint(url: StoreUrl, exc: BaseException) -> str:
    """What a failed connect most likely means when TLS is involved, as a tail for its one line."""
    text = str(exc)
    if "CERTIFICATE_VERIFY_FAILED" in text:
        return " (trust the server's CA with ?ssl_ca_certs=PATH in the rediss:// URL)"
    if not url.tls and ("reset by peer" in text or "closed by server" in text):
        return " (a TLS port? use rediss://)"     # the server hung up on a plain-text PING
    if url.tls and isinstance(exc, rex.TimeoutError | TimeoutError):
        return " (not a TLS port? use redis://)"   # a plain server waits for a command, not a handshake
    return ""


def first_line(exc: BaseException) -> str:
    """The first line of an error's text (its type's name when it has none)."""
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


async def _ping(client: aioredis.Redis) -> None:
    """``client.ping()``, stopped at once when the caller is cancelled. redis-py 8.1 swallows a
    cancellation that lands at some points of its connect (the ping then waits out its 5 s socket
    timeout: a SIGTERM to a server starting against a silent store was ignored that long). So the
    ping runs as a task of its own that never raises; a cancelled caller stops waiting for it."""
    async def quietly() -> BaseException | None:
        try:
            await client.ping()
        except BaseException as exc:         # noqa: BLE001 - handed to the caller below
            return exc
        return None

    task = asyncio.ensure_future(quietly())
    try:
        await asyncio.wait({task})
    except asyncio.CancelledError:
        task.cancel()
        raise
    error = task.result()
    if error is not None:
        raise error
