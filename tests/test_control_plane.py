"""The deployment record is the running runtime's: another client's deployment
record is never trusted - the knob watcher rewrites it within a poll or two, the runtime validates
knobs against its own deployment, and the server's PUT /v1/knobs validates against the server's."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable

import pytest
import redis

from tests.api_client import api_on
from wavepp.runtime.control.knobs import Deployment, KnobError, Knobs, validated_values
from wavepp.runtime.control.plane import KNOB_POLL_S, KnobWatcher
from wavepp.runtime.engines.config import SimConfig
from wavepp.runtime.engines.sim.engine import SimEngine
from wavepp.store.redis_store import RedisStore

OWN = Deployment(64, 2)
FOREIGN = [{"block_size": 7, "num_stages": 99},        # valid-looking: a PUT of ring=2 failed on 16384 % 7
           {"block_size": 0, "num_stages": -1}]        # corrupt: read as absent, so nothing was checked
# A poll or two, with room for a loaded machine (the suite shares two cores).
REWRITTEN_WITHIN_S = max(1.0, 4 * KNOB_POLL_S)


@pytest.fixture
def url(redis_cluster: Callable[[str], str]) -> str:
    """A store URL on the local Redis (db 13) under a cluster of its own; its keys deleted after."""
    return redis_cluster("deployment")


def _plain(url: str) -> tuple[redis.Redis, str]:
    base, _, cluster = url.partition("?cluster=")
    return redis.Redis.from_url(base), f"wavepp:{{{cluster}}}:deployment"


def _stored(client: redis.Redis, key: str) -> object:
    raw = client.get(key)
    return json.loads(raw) if raw is not None else None  # type: ignore[arg-type]


@pytest.mark.parametrize("foreign", FOREIGN, ids=["block-size-7", "corrupt"])
def test_the_watcher_rewrites_a_foreign_deployment_record_and_says_so_once(
        url: str, foreign: dict[str, int], caplog: pytest.LogCaptureFixture) -> None:
    client, key = _plain(url)
    applied: list[int] = []

    async def body() -> None:
        store = await RedisStore.connect(url)
        try:
            watcher = KnobWatcher(store, OWN, lambda knobs, version: applied.append(version), lambda v, r: None)
            await watcher.publish(Knobs())
            with caplog.at_level(logging.WARNING):
                for _ in range(3):                        # a client that keeps writing it
                    client.set(key, json.dumps(foreign))
                    await watcher.poll()
                    assert _stored(client, key) == OWN.as_dict()
            assert watcher.refused is None and watcher.version == 1   # its knobs were never in question
        finally:
            await store.close()
    asyncio.run(body())
    lines = [r.getMessage() for r in caplog.records if "rewriting" in r.getMessage()]
    assert len(lines) == 1 and "\n" not in lines[0], lines


def test_a_write_with_the_deployment_at_hand_is_validated_against_it(url: str) -> None:
    """knobs_set(deployment=...) never trusts the stored record: the stored block size 7 does not
    refuse a valid write, and a corrupt record (no block size at all) does not let a bad one through."""
    client, key = _plain(url)

    async def body() -> None:
        store = await RedisStore.connect(url)
        try:
            client.set(key, json.dumps(FOREIGN[0]))
            written = await store.knobs_set({"ring": 2}, deployment=OWN, validate=validated_values)
            assert written.values["ring"] == 2 and written.deployment == OWN
            client.set(key, json.dumps(FOREIGN[1]))
            with pytest.raises(KnobError, match="max_wave_tokens: 8200 is not a multiple of the block size 64"):
                await store.knobs_set({"max_wave_tokens": 8200}, deployment=OWN, validate=validated_values)
            assert (await store.knobs_get()).version == written.version        # nothing written
        finally:
            await store.close()
    asyncio.run(body())


def test_a_server_whose_deployment_record_is_overwritten_rewrites_it_and_validates_puts_against_its_own(
        url: str) -> None:
    client, key = _plain(url)
    engine = SimEngine(SimConfig("llama-3-8b", "h200", 2, kv_blocks=[500], store_url=url, clock="wall"))

    async def rewritten() -> float:
        start = time.monotonic()
        while _stored(client, key) != OWN.as_dict():
            assert time.monotonic() - start < REWRITTEN_WITHIN_S, f"still {_stored(client, key)}"
            await asyncio.sleep(0.01)
        return time.monotonic() - start

    async def body() -> None:
        async with api_on(engine) as (api, rt):
            client.set(key, json.dumps(FOREIGN[0]))
            put = await api.put("/v1/knobs", json={"changes": {"ring": 2}})
            assert put.status_code == 200, put.text
            assert put.json()["deployment"] == OWN.as_dict()
            await rewritten()
            # A corrupt record beside values another client wrote unvalidated: a PUT that keeps
            # them is refused against the server's block size (it passed, checked against nothing).
            client.set(key, json.dumps(FOREIGN[1]))
            prefix = key.removesuffix(":deployment")
            values = {**json.loads(client.hget(f"{prefix}:knobs", "values")), "max_wave_tokens": 8200}  # type: ignore[arg-type]
            client.hset(f"{prefix}:knobs", mapping={"version": 99, "values": json.dumps(values)})
            put = await api.put("/v1/knobs", json={"changes": {"ring": 3}})
            assert put.status_code == 422, put.text
            assert "max_wave_tokens: 8200 is not a multiple of the block size 64" in put.json()["error"]["message"]
            await rewritten()
    asyncio.run(body())
