"""A knobs record the store lost (Redis restarted empty) is written back by the running runtime at
the version its clients saw: a version never moves backwards for a client, and a writer's stale
``expected_version`` is refused after the restart as before it."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable

import pytest
import redis

from wavepp.runtime.control.knobs import Deployment, Knobs, validated_values
from wavepp.runtime.control.plane import KnobWatcher
from wavepp.store.base import StoreError
from wavepp.store.redis_store import RedisStore

OWN = Deployment(64, 2)


@pytest.fixture
def url(redis_cluster: Callable[[str], str]) -> str:
    return redis_cluster("writeback")


def _restart_empty(url: str) -> None:
    """What a Redis restarted without persistence leaves of the cluster: nothing."""
    base, _, cluster = url.partition("?cluster=")
    client = redis.Redis.from_url(base)
    keys = list(client.scan_iter(match=f"wavepp:{{{cluster}}}:*"))
    if keys:
        client.delete(*keys)
    client.close()


def test_the_written_back_record_keeps_the_version_the_runtime_ran(url: str) -> None:
    async def body() -> None:
        store = await RedisStore.connect(url)
        try:
            watcher = KnobWatcher(store, OWN, lambda knobs, version: None, lambda v, r: None)
            await watcher.publish(Knobs())
            for ring in range(2, 7):                     # an operator's writes: versions 2..6
                await store.knobs_set({"ring": ring}, validate=validated_values)
            await watcher.poll()
            assert watcher.version == 6
            _restart_empty(url)
            await watcher.poll()                         # "writing back the knobs of version 6"
            record = await store.knobs_get()
            assert record.version == 6 and record.values["ring"] == 6
            with pytest.raises(StoreError, match="version 6, expected 1"):   # a stale writer: refused
                await store.knobs_set({"ring": 3}, expected_version=1, deployment=OWN, validate=validated_values)
            assert (await store.knobs_set({"ring": 3}, expected_version=6, validate=validated_values)).version == 7
        finally:
            await store.close()
    asyncio.run(body())


def test_a_record_the_runtime_refused_is_written_back_above_the_refused_version(url: str) -> None:
    """The runtime runs version 1 and refused version 2 (another client wrote it unvalidated): its own
    knobs come back as version 3, so no client sees version 2's number with other values."""
    base, _, cluster = url.partition("?cluster=")
    client = redis.Redis.from_url(base)
    key = f"wavepp:{{{cluster}}}:knobs"

    async def body() -> None:
        store = await RedisStore.connect(url)
        try:
            watcher = KnobWatcher(store, OWN, lambda knobs, version: None, lambda v, r: None)
            await watcher.publish(Knobs())
            bad = {**Knobs().as_dict(), "max_wave_tokens": 8200}
            client.hset(key, mapping={"version": 2, "values": json.dumps(bad)})
            await watcher.poll()
            assert watcher.refused is not None and watcher.version == 1
            _restart_empty(url)
            await watcher.poll()
            record = await store.knobs_get()
            assert record.version == 3 and record.values == Knobs().as_dict()
        finally:
            await store.close()
            client.close()
    asyncio.run(body())


def test_a_poll_and_the_reconnect_hook_writing_back_at_once_write_the_record_once(url: str) -> None:
    """After a restart the poll and the store's reconnect hook (which publishes again) may both find the
    record gone. Run together they must write it once, at the version the runtime runs: two writes
    each reading it empty made it version 2, a version no client ever saw the runtime run."""
    async def body() -> None:
        store = await RedisStore.connect(url)
        try:
            watcher = KnobWatcher(store, OWN, lambda knobs, version: None, lambda v, r: None)
            await watcher.publish(Knobs(ring=3))
            assert watcher.version == 1
            for _ in range(20):                          # the two calls interleave differently each time
                _restart_empty(url)
                await asyncio.gather(watcher.poll(), watcher.publish(watcher.knobs), watcher.poll())
                record = await store.knobs_get()
                assert (record.version, record.values["ring"]) == (1, 3)
                assert (watcher.version, watcher.knobs.ring) == (1, 3)
        finally:
            await store.close()
    asyncio.run(body())
