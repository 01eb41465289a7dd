"""Fixtures for the store tests: a real Redis server (never a fake) and fresh stores of both kinds.

Which Redis: the one at 127.0.0.1:6379 when it answers PING within 0.5 s (database 13), else a
private ``redis-server`` started for the session on a free port. With neither, every test that
needs Redis fails (it does not skip): ``make test`` installs the server.

Isolation: each Redis store gets a cluster name of its own (``?cluster=...``), so its keys live
under ``wavepp:{<cluster>}:`` and nothing else in the database is touched. The keys are deleted
before and after each test (``clear_all`` in the test's loop, then a plain-client sweep). No
``FLUSHDB``: other checkouts may be running this suite on the same shared database.

Tests are plain functions around ``asyncio.run``; ``StoreFactory.run`` runs a test body and closes
its stores inside that same loop (a redis-py asyncio client cannot outlive its loop).
"""

from __future__ import annotations

import asyncio
import itertools
import os
import secrets
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, TypeVar

import pytest
import redis
from redis import exceptions as rex
from redis.backoff import NoBackoff
from redis.retry import Retry

from wavepp.store.memory import MemoryStore
from wavepp.store.redis_store import RedisStore

T = TypeVar("T")

HOST = "127.0.0.1"
SHARED_PORT = 6379
TEST_DB = 13
START_TIMEOUT_S = 10.0
NO_SERVER = ("redis-server is not on PATH: the store tests need a real Redis (127.0.0.1:6379 when it answers, "
             "else a private redis-server); `make test` installs it, or apt-get install redis-server")

_session_tag = f"{os.getpid()}-{secrets.token_hex(3)}"
_cluster_numbers = itertools.count()
_private_servers: list[subprocess.Popen[bytes]] = []


def new_cluster_name() -> str:
    """A cluster name no other test (nor any concurrent run of this suite) uses."""
    return f"t{_session_tag}-{next(_cluster_numbers)}"


def _probe_client(port: int, db: int = 0) -> redis.Redis:
    """A client that gives up after 0.5 s (redis-py's default retries take seconds on a closed port)."""
    return redis.Redis(host=HOST, port=port, db=db, socket_timeout=0.5, socket_connect_timeout=0.5,
                       retry=Retry(NoBackoff(), 0))


def _ping(port: int, db: int = 0) -> bool:
    """Does a usable server (no password needed, ``db`` selectable) answer at ``port``?"""
    return pings(_probe_client(port, db))


def pings(client: redis.Redis) -> bool:
    """Does ``client``'s server answer PING? The client is closed after."""
    try:
        return bool(client.ping())
    except rex.RedisError:
        return False
    finally:
        client.close()


def _answers(port: int) -> bool:
    """Is a server up at ``port``? An authentication error is an answer too (``--requirepass``)."""
    client = _probe_client(port)
    try:
        client.ping()
        return True
    except (rex.AuthenticationError, rex.ResponseError):
        return True
    except rex.RedisError:
        return False
    finally:
        client.close()


def free_port() -> int:
    """A TCP port nothing listens on right now (bind to 0, read it, release it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


def start_private_redis(*extra_args: str) -> tuple[subprocess.Popen[bytes], int]:
    """Start ``redis-server`` on a free port (no persistence, loopback only); return it once it answers.

    The process is terminated at session end (or earlier by the caller)."""
    return start_redis_on_a_free_port(lambda port: ["--port", str(port), "--bind", HOST, *extra_args], _answers,
                                      f"redis-server {' '.join(extra_args)}")


def start_redis_on_a_free_port(flags: Callable[[int], list[str]], answers: Callable[[int], bool],
                               what: str) -> tuple[subprocess.Popen[bytes], int]:
    """``redis-server`` with ``flags(port)`` on a free port, once ``answers(port)``. Another process may
    grab the port between our probe and the server's bind, so a server that dies at start is retried."""
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.fail(NO_SERVER, pytrace=False)
    last_log = ""
    for _ in range(3):
        port = free_port()
        log = tempfile.TemporaryFile()
        proc = subprocess.Popen([binary, "--save", "", "--appendonly", "no", *flags(port)], stdout=log,
                                stderr=subprocess.STDOUT)
        _private_servers.append(proc)
        deadline = time.monotonic() + START_TIMEOUT_S
        while proc.poll() is None and time.monotonic() < deadline:
            if answers(port):
                log.close()
                return proc, port
            time.sleep(0.02)
        stop_server(proc)
        log.seek(0)
        last_log = log.read().decode(errors="replace")[-2000:]
        log.close()
    pytest.fail(f"{what} did not start; its last log:\n{last_log}", pytrace=False)


def stop_server(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def delete_cluster_keys(redis_url: str, cluster: str) -> int:
    """Delete one deployment's keys with a plain client (the safety net after a test)."""
    client = redis.Redis.from_url(redis_url, socket_timeout=2.0, socket_connect_timeout=2.0)
    try:
        keys = list(client.scan_iter(match=f"wavepp:{{{cluster}}}:*", count=1000))
        if keys:
            client.delete(*keys)
        return len(keys)
    finally:
        client.close()


@pytest.fixture(scope="session")
def _servers() -> Iterator[None]:
    """Terminates every private redis-server this session started."""
    yield
    while _private_servers:
        stop_server(_private_servers.pop())


@pytest.fixture(scope="session")
def redis_url(_servers: None) -> str:
    """URL of a usable Redis server and test database (no ``cluster`` parameter)."""
    if _ping(SHARED_PORT, TEST_DB):
        return f"redis://{HOST}:{SHARED_PORT}/{TEST_DB}"
    _, port = start_private_redis()
    return f"redis://{HOST}:{port}/{TEST_DB}"


@pytest.fixture(name="start_private_redis")
def start_private_redis_fixture(_servers: None) -> Callable[..., tuple[subprocess.Popen[bytes], int]]:
    """:func:`start_private_redis` for tests (they cannot import conftest under importlib mode)."""
    return start_private_redis


@pytest.fixture
def redis_clusters(redis_url: str) -> Iterator[Callable[[], str]]:
    """Hands out fresh cluster names; their keys are swept before use and after the test."""
    used: list[str] = []

    def new() -> str:
        name = new_cluster_name()
        delete_cluster_keys(redis_url, name)
        used.append(name)
        return name

    yield new
    for name in used:
        delete_cluster_keys(redis_url, name)


@pytest.fixture
def redis_store_url(redis_url: str, redis_clusters: Callable[[], str]) -> str:
    """A store URL naming a fresh, empty deployment (``redis://.../13?cluster=...``)."""
    return f"{redis_url}?cluster={redis_clusters()}"


class StoreFactory:
    """Opens fresh, empty stores of one kind inside the running loop; :meth:`run` closes them there."""

    def __init__(self, kind: str, redis_url: str = "", clusters: Callable[[], str] | None = None) -> None:
        self.kind = kind
        self._redis_url = redis_url
        self._clusters = clusters
        self._stores: list[Any] = []

    async def __call__(self) -> Any:
        store: Any
        if self.kind == "memory":
            store = MemoryStore()
        else:
            assert self._clusters is not None
            store = await RedisStore.connect(f"{self._redis_url}?cluster={self._clusters()}")
            await store.clear_all()
        self._stores.append(store)
        return store

    async def aclose(self) -> None:
        while self._stores:
            store = self._stores.pop()
            if isinstance(store, RedisStore):
                await store.clear_all()
            await store.close()

    def run(self, body: Callable[[], Awaitable[T]]) -> T:
        """``asyncio.run(body())``, closing (and clearing) every store it opened in the same loop."""
        async def main() -> T:
            try:
                return await body()
            finally:
                await self.aclose()
        return asyncio.run(main())


@pytest.fixture(params=["memory", "redis"])
def store_factory(request: pytest.FixtureRequest) -> StoreFactory:
    """Async factory of fresh stores: ``MemoryStore()`` or a ``RedisStore`` on its own cluster."""
    if request.param == "memory":
        return StoreFactory("memory")
    return StoreFactory("redis", request.getfixturevalue("redis_url"), request.getfixturevalue("redis_clusters"))
