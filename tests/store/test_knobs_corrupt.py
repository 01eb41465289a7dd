"""Knob entries another client corrupted: a reader gets them as
absent with a one-line note, never an exception; a write replaces them and completes with its
history, or changes nothing. A version is a bounded integer: one out of bounds is
corrupt too, and no write spins on it."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
import redis

from wavepp.runtime.cli import main
from wavepp.runtime.control.knobs import Deployment, Knobs, validated_values
from wavepp.store.base import KNOBS_VERSION_MAX, StoreError
from wavepp.store.redis_store import RedisStore

Corrupt = Callable[[redis.Redis, str], Any]

CORRUPTIONS: dict[str, Corrupt] = {
    "knobs-not-json": lambda r, p: r.hset(f"{p}:knobs", mapping={"version": "3", "values": "{not json"}),
    "knobs-version-not-int": lambda r, p: r.hset(f"{p}:knobs", mapping={"version": "x", "values": "{}"}),
    "knobs-wrong-type": lambda r, p: r.set(f"{p}:knobs", "hello"),
    "knobs-a-list": lambda r, p: r.rpush(f"{p}:knobs", "a", "b"),
    # Versions Lua's doubles cannot count from: the write's reply came back as -2**63 and knobs_set
    # read again and wrote again, forever (a history entry each time).
    "knobs-version-41-digits": lambda r, p: r.hset(f"{p}:knobs", mapping={"version": "1" * 41, "values": "{}"}),
    "knobs-version-over-int64": lambda r, p: r.hset(f"{p}:knobs", mapping={"version": str(2**63), "values": "{}"}),
    "knobs-version-at-the-max": lambda r, p: r.hset(f"{p}:knobs", mapping={"version": str(KNOBS_VERSION_MAX),
                                                                          "values": "{}"}),
    "knobs-version-5000-digits": lambda r, p: r.hset(f"{p}:knobs", mapping={"version": "9" * 5000, "values": "{}"}),
}
WRITE_WITHIN_S = 5.0        # a write that takes longer is spinning


def _run(url: str, body: Callable[[RedisStore], Any]) -> Any:
    async def main_() -> Any:
        store = await RedisStore.connect(url)
        try:
            return await body(store)
        finally:
            await store.close()
    return asyncio.run(main_())


def _plain(url: str) -> tuple[redis.Redis, str]:
    base, _, cluster = url.partition("?cluster=")
    return redis.Redis.from_url(base), f"wavepp:{{{cluster}}}"


@pytest.mark.parametrize("corrupt", list(CORRUPTIONS.values()), ids=list(CORRUPTIONS))
def test_a_corrupt_knobs_record_reads_as_absent_and_the_next_write_replaces_it(redis_store_url: str,
                                                                               corrupt: Corrupt) -> None:
    client, prefix = _plain(redis_store_url)
    corrupt(client, prefix)

    async def body(store: RedisStore) -> None:
        record = await store.knobs_get()
        assert (record.version, record.values) == (0, {})
        assert record.note and "read as absent" in record.note and "\n" not in record.note
        written = await asyncio.wait_for(store.knobs_set({"ring": 4}, validate=validated_values), WRITE_WITHIN_S)
        assert written.version == 1 and written.values == {**Knobs().as_dict(), "ring": 4}
        assert written.note == record.note                  # says what it replaced
        again = await store.knobs_get()
        assert (again.version, again.values, again.note) == (1, written.values, None)
        assert [(h["version"], h["changes"]) for h in await store.knobs_history(10)] == [(1, {"ring": 4})]
    _run(redis_store_url, body)


@pytest.mark.parametrize("wrong", ["string", "hash", "list"])
def test_a_history_of_the_wrong_type_never_splits_a_write(redis_store_url: str, wrong: str) -> None:
    """Today the record is written, then XADD fails: the write must complete with its history."""
    client, prefix = _plain(redis_store_url)
    key = f"{prefix}:knobs:history"
    {"string": lambda: client.set(key, "x"), "hash": lambda: client.hset(key, "a", "b"),
     "list": lambda: client.rpush(key, "x")}[wrong]()

    async def body(store: RedisStore) -> None:
        assert await store.knobs_history(10) == []          # read as absent, no exception
        written = await store.knobs_set({"ring": 4}, validate=validated_values)
        assert written.version == 1 and written.note and "history" in written.note
        assert (await store.knobs_get()).values["ring"] == 4
        assert [(h["version"], h["changes"]) for h in await store.knobs_history(10)] == [(1, {"ring": 4})]
    _run(redis_store_url, body)


def test_cli_write_over_a_history_of_the_wrong_type_is_complete(redis_store_url: str,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    """`wavepp knobs --set ring=4` with a string at the history key: exit 0, record and history both
    written, one warning line (today: exit 1 with a traceback, and the record written anyway)."""
    client, prefix = _plain(redis_store_url)
    client.set(f"{prefix}:knobs:history", "x")
    assert main(["knobs", "--store", redis_store_url, "--set", "ring=4", "--history", "5"]) == 0
    out, err = capsys.readouterr()
    assert "knobs version 1" in out and "v1: {'ring': 4}" in out
    assert err.strip().splitlines() == [f"wavepp: warning: {err.strip().removeprefix('wavepp: warning: ')}"]
    assert "history" in err and "Traceback" not in err


@pytest.mark.parametrize("value", ["{not json", '{"block_size": 0, "num_stages": 2}', '[64]'])
def test_a_corrupt_deployment_record_reads_as_absent(redis_store_url: str, value: str) -> None:
    client, prefix = _plain(redis_store_url)
    client.set(f"{prefix}:deployment", value)

    async def body(store: RedisStore) -> None:
        record = await store.knobs_get()
        assert record.deployment is None and record.note and "deployment" in record.note
        await store.deployment_put(Deployment(64, 2))
        record = await store.knobs_get()
        assert record.deployment == Deployment(64, 2) and record.note is None
    _run(redis_store_url, body)


def test_a_deployment_change_between_read_and_write_is_noticed(redis_store_url: str) -> None:
    """The compare-and-set covers the deployment record too: a write validated against an old block
    size is re-read and re-validated, never stored unchecked."""
    async def body(store: RedisStore) -> None:
        await store.deployment_put(Deployment(64, 2))
        state = await store._knob_state()
        await store.deployment_put(Deployment(128, 2))
        reply = await store._knobs(keys=store.knob_keys(), args=[
            "write", *state, 1, '{"max_wave_tokens": 8256}', "{}", 10])
        assert reply == [-1]
        assert (await store.knobs_get()).version == 0
    _run(redis_store_url, body)


@pytest.mark.timeout(60)
def test_cli_write_over_a_huge_version_returns(redis_store_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    """`wavepp knobs --set ring=2` over a 41-digit version: one warning line, version 1 written (it
    never returned)."""
    client, prefix = _plain(redis_store_url)
    client.hset(f"{prefix}:knobs", mapping={"version": "1" * 41, "values": "{}"})
    assert main(["knobs", "--store", redis_store_url, "--set", "ring=2"]) == 0
    out, err = capsys.readouterr()
    assert "knobs version 1" in out
    assert len(err.strip().splitlines()) == 1 and "version" in err and "read as absent" in err
    assert client.hget(f"{prefix}:knobs", "version") == b"1"
    assert client.xlen(f"{prefix}:knobs:history") == 1


@pytest.mark.parametrize("version", [KNOBS_VERSION_MAX + 1, 2**63, 0, -3])
def test_the_script_writes_no_version_out_of_bounds(redis_store_url: str, version: int) -> None:
    """The Lua side checks the version it is asked to write too (a double is exact up to 2**53 only)."""
    async def body(store: RedisStore) -> None:
        state = await store._knob_state()
        reply = await store._knobs(keys=store.knob_keys(), args=["write", *state, version, "{}", "{}", 10])
        assert reply == [-2]
        assert await store.client.exists(*store.knob_keys()[:2]) == 0        # nothing written
    _run(redis_store_url, body)


def test_a_record_that_keeps_changing_ends_the_write(redis_store_url: str,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """The compare-and-set retries a bounded number of times, then says so: it never spins."""
    async def body(store: RedisStore) -> None:
        async def always_changed(*args: Any, **kwargs: Any) -> list[int]:
            if kwargs.get("args", [""])[0] == "read":
                return await real(*args, **kwargs)        # type: ignore[no-any-return]
            return [-1]
        real = store._knobs
        monkeypatch.setattr(store, "_knobs", always_changed)
        with pytest.raises(StoreError, match="kept changing"):
            await asyncio.wait_for(store.knobs_set({"ring": 4}, validate=validated_values), WRITE_WITHIN_S)
    _run(redis_store_url, body)
