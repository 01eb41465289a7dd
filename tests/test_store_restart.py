"""One Redis restart is one outage and one rebuild: connections the client pooled before the
restart are all dead after it, and a call that picks one - maybe seconds later, when a burst of
calls reaches deeper into the pool - must not be taken for a second outage (which rebuilt the
index again and turned /ready back to 503)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from tests.private_redis import PrivateRedis
from wavepp.store.redis_store import RedisStore
from wavepp.store.resilient import ResilientStore

BURST = 24          # concurrent calls: the pool holds this many connections


def test_one_restart_is_one_outage_and_one_rebuild(tmp_path: Path) -> None:
    server = PrivateRedis(tmp_path)
    seen: dict[str, int] = {}

    async def scenario() -> None:
        store = ResilientStore(await RedisStore.connect(server.url("one-rebuild")), initial_backoff_s=0.01,
                               max_backoff_s=0.1)
        rebuilt: list[int] = []

        async def rebuild() -> None:
            rebuilt.append(1)
        store.on_reconnect.append(rebuild)
        try:
            await asyncio.gather(*(store.status_get() for _ in range(BURST)))   # a deep pool
            await asyncio.to_thread(server.bounce, 0.2)
            for _ in range(5):                    # light use: the outage, then the store back
                await store.status_get()
                await asyncio.sleep(0.05)
            await asyncio.sleep(0.3)              # the rebuild ran
            for _ in range(3):                    # bursts later on reach the connections pooled before
                await asyncio.gather(*(store.status_get() for _ in range(BURST)))
                await asyncio.sleep(0.3)
            seen.update(outages=store.outages, rebuilds=store.rebuilds, rebuilt=len(rebuilt))
        finally:
            await store.close()

    try:
        asyncio.run(scenario())
    finally:
        server.stop()
    assert seen == {"outages": 1, "rebuilds": 1, "rebuilt": 1}, seen
