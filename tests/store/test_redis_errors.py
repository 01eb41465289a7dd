"""What the user sees when the store cannot be used: malformed URLs, unreachable servers, bad
credentials (one-line StoreError each), and a rejected knob write that leaves Redis untouched."""

from __future__ import annotations

import asyncio
import socket
import subprocess
from collections.abc import Callable
from typing import Any

import pytest
import redis

from wavepp.runtime.control.knobs import KnobError, validated_values
from wavepp.store.base import StoreError
from wavepp.store.redis_store import RedisStore
from wavepp.store.resilient import ResilientStore, StoreRefused, StoreUnavailable
from wavepp.store.urls import StoreUrl, parse_store_url

StartRedis = Callable[..., tuple[subprocess.Popen[bytes], int]]


@pytest.mark.parametrize(("text", "expected"), [
    ("memory", StoreUrl("memory")),
    ("redis://h:1/2", StoreUrl("redis", "redis://h:1/2", "h", 1, 2, False, "default")),
    ("rediss://u:p@h/0?cluster=x", StoreUrl("redis", "rediss://u:p@h/0", "h", 6379, 0, True, "x")),
])
def test_parse_accepts(text: str, expected: StoreUrl) -> None:
    """Our own ``cluster`` parameter is taken out of the URL handed to redis-py."""
    assert parse_store_url(text) == expected


@pytest.mark.parametrize("text", [
    "http://x", "redis://", "redis://h:notaport", "redis://h/db", "redis://h/0?foo=1",
    "redis://h/0?cluster=bad name",
])
def test_parse_rejects_with_one_line(text: str) -> None:
    with pytest.raises(StoreError) as info:
        parse_store_url(text)
    message = str(info.value)
    assert message.startswith("malformed store URL") and "\n" not in message


def _closed_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])             # released on exit: nothing listens there


def _connect_error(url: str) -> str:
    async def body() -> None:
        store = await RedisStore.connect(url, timeout_s=1.0)
        await store.close()
    with pytest.raises(StoreError) as info:
        asyncio.run(body())
    assert "\n" not in str(info.value)
    return str(info.value)


def test_connect_to_closed_port_cannot_reach() -> None:
    port = _closed_port()
    message = _connect_error(f"redis://127.0.0.1:{port}/0")
    assert "cannot reach redis" in message and f"127.0.0.1:{port}/0" in message


def test_a_cancelled_connect_to_a_silent_server_stops_at_once_wherever_the_cancel_lands() -> None:
    """redis-py 8.1 swallowed a cancellation landing at some steps of its connect and waited out its 5 s
    read timeout instead (a SIGTERM to a server starting against a silent store was ignored that long)."""
    silent = socket.create_server(("127.0.0.1", 0))        # accepts, never answers
    url = f"redis://127.0.0.1:{silent.getsockname()[1]}/0"

    async def cancel_after(steps: int) -> float:
        task = asyncio.create_task(RedisStore.connect(url))
        for _ in range(steps):
            await asyncio.sleep(0)
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return loop.time() - t0

    try:
        waited = [asyncio.run(cancel_after(steps)) for steps in range(14)]
    finally:
        silent.close()
    assert max(waited) < 1.0, [round(w, 3) for w in waited]


def test_connect_with_wrong_or_missing_password_fails_authentication(start_private_redis: StartRedis) -> None:
    _, port = start_private_redis("--requirepass", "secret")
    for url in (f"redis://:letmein@127.0.0.1:{port}/0", f"redis://127.0.0.1:{port}/0"):
        message = _connect_error(url)
        assert "authentication failed" in message and f"127.0.0.1:{port}/0" in message
        assert "letmein" not in message                  # no password in what the user sees

    async def body() -> int:                             # the right password works
        store = await RedisStore.connect(f"redis://:secret@127.0.0.1:{port}/0")
        try:
            return (await store.knobs_set({"ring": 2}, validate=validated_values)).version
        finally:
            await store.close()
    assert asyncio.run(body()) == 1


def test_server_gone_mid_session_is_store_unavailable(start_private_redis: StartRedis) -> None:
    """A call after the server died raises StoreUnavailable (a StoreError the caller may retry)."""
    proc, port = start_private_redis()

    async def body() -> None:
        store = await RedisStore.connect(f"redis://127.0.0.1:{port}/0", timeout_s=0.5)
        try:
            await store.hint_update(0, [1, 2], [])
            proc.terminate()
            proc.wait(timeout=5)
            with pytest.raises(StoreUnavailable) as info:
                await store.hint_count(0)
            assert "redis unavailable" in str(info.value)
        finally:
            await store.close()
    asyncio.run(body())


@pytest.mark.parametrize("refusal", ["out of memory", "read-only replica"])
def test_a_server_refusing_writes_is_store_refused_and_retried_until_it_takes_them(
        refusal: str, start_private_redis: StartRedis) -> None:
    """OOM under noeviction and READONLY are a server's state, not a bad call: StoreRefused (a
    StoreUnavailable), which the resilient store retries - counting each refusal - until the write is
    taken, also from inside a Lua script (the hint index's)."""
    proc, port = start_private_redis()
    admin = redis.Redis(port=port)

    async def body() -> None:
        inner = await RedisStore.connect(f"redis://127.0.0.1:{port}/0", timeout_s=0.5)
        with pytest.raises(StoreRefused) as info:
            await refuse_then(inner.hint_update(0, [1, 2], []))
        assert "refuses writes for now" in str(info.value) and "\n" not in str(info.value)
        store = ResilientStore(inner, initial_backoff_s=0.01, max_backoff_s=0.05)
        counted: list[tuple[str, str]] = []
        store.on_failure.append(lambda call, reason: counted.append((call, reason)))
        refuse()
        write = asyncio.ensure_future(store.hint_update(0, [3], []))
        await asyncio.sleep(0.3)
        assert not write.done() and store.down            # waiting, not failed
        accept()
        await asyncio.wait_for(write, 5)
        assert await store.hint_count(0) == 1               # block 3: the refused first call left nothing
        assert counted and set(counted) == {("hint_update", "refused")}
        assert store.failures["hint_update", "refused"] == len(counted)
        await store.close()

    def refuse() -> None:
        if refusal == "out of memory":
            admin.config_set("maxmemory", 1)
        else:
            admin.replicaof("127.0.0.1", 1)                 # nobody there: a replica that stays read-only

    def accept() -> None:
        if refusal == "out of memory":
            admin.config_set("maxmemory", 0)
        else:
            admin.replicaof("no", "one")

    async def refuse_then(call: Any) -> Any:
        refuse()
        try:
            return await call
        finally:
            accept()
    try:
        asyncio.run(body())
    finally:
        admin.close()


def _raw_knobs(client: redis.Redis, store: RedisStore) -> tuple[Any, ...]:
    """The knobs hash and its history stream, bytes as stored."""
    return (client.hgetall(store.key("knobs")), client.xrange(store.key("knobs", "history")),
            client.exists(store.key("knobs"), store.key("knobs", "history")))


def test_invalid_knob_write_leaves_stored_record_byte_identical(redis_url: str, redis_store_url: str) -> None:
    bad = [{"ring": "8"}, {"policy": "fifo"}, {"min_wave_tokens": 1 << 21}, {"unknown": 1}]
    client = redis.Redis.from_url(redis_url)

    async def body() -> None:
        store = await RedisStore.connect(redis_store_url)
        try:
            empty = _raw_knobs(client, store)
            assert empty == ({}, [], 0)
            for changes in bad:                          # nothing is created for a bad first write
                with pytest.raises(KnobError):
                    await store.knobs_set(changes, validate=validated_values)
            assert _raw_knobs(client, store) == empty
            await store.knobs_set({"max_leases": 64, "hysteresis": False}, validate=validated_values)
            before = _raw_knobs(client, store)
            assert before[0][b"version"] == b"1" and before[2] == 2
            for changes in bad:
                with pytest.raises(KnobError):
                    await store.knobs_set(changes, validate=validated_values)
                with pytest.raises(KnobError):
                    await store.knobs_set(changes, expected_version=1, validate=validated_values)
            assert _raw_knobs(client, store) == before
        finally:
            await store.close()
    try:
        asyncio.run(body())
    finally:
        client.close()


def test_a_user_denied_info_still_connects_and_the_store_works(start_private_redis: StartRedis) -> None:
    """Every (re)connect asks the server's run_id to tell a restart (store/redis_connect.py); a user whose ACL
    denies INFO gets a store that works all the same, with nothing to compare."""
    _, port = start_private_redis()
    admin = redis.Redis(port=port, socket_timeout=5)
    admin.execute_command("ACL", "SETUSER", "limited", "on", ">pw-limited", "~*", "&*", "+@all", "-info")
    admin.close()

    async def go() -> Any:
        store = await RedisStore.connect(f"redis://limited:pw-limited@127.0.0.1:{port}/0?cluster=acl")
        try:
            await store.hint_update(0, [11, 12], [])
            return await store.hint_count(0)
        finally:
            await store.close()
    assert asyncio.run(go()) == 2
