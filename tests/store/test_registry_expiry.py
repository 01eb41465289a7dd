"""Lease/escrow pins outlive their holder only by the heartbeat TTL.

A holder process that is killed stops refreshing; its entries disappear from ``registry_entries``
and ``registry_reap`` hands them (once) to whoever releases the stages' pins. A live holder's
entries are never reaped, however often the reaper runs.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time
from typing import Any

from wavepp.store.base import RegistryEntry
from wavepp.store.redis_store import RedisStore

HOLDER = "holder-proc"
TTL_S = 0.5
EXPECTED = [RegistryEntry(f"req-{i}", HOLDER, (0, i), i, 2 * i) for i in range(3)]

# Runs in its own interpreter: put three entries, then heartbeat every 0.1 s until killed.
HOLDER_CODE = f"""
import asyncio, sys
from wavepp.store.base import RegistryEntry
from wavepp.store.redis_store import RedisStore

async def main(url):
    store = await RedisStore.connect(url)
    entries = [RegistryEntry(f"req-{{i}}", {HOLDER!r}, (0, i), i, 2 * i) for i in range(3)]
    await store.registry_put(entries, {TTL_S})
    while True:
        await asyncio.sleep(0.1)
        await store.registry_refresh({HOLDER!r}, {TTL_S})

asyncio.run(main(sys.argv[1]))
"""


async def _wait_for(store: RedisStore, want: list[RegistryEntry], timeout_s: float) -> float:
    """Poll ``registry_entries`` until it equals ``want``; return the seconds it took."""
    start = time.monotonic()
    while await store.registry_entries() != want:
        assert time.monotonic() - start < timeout_s, f"registry never became {want}"
        await asyncio.sleep(0.02)
    return time.monotonic() - start


def test_killed_holders_pins_expire_and_are_reaped_once(redis_store_url: str) -> None:
    holder = subprocess.Popen([sys.executable, "-c", HOLDER_CODE, redis_store_url])

    async def body() -> None:
        store = await RedisStore.connect(redis_store_url)
        try:
            await _wait_for(store, EXPECTED, timeout_s=15.0)
            alive_since = time.monotonic()
            while time.monotonic() - alive_since < 1.2:  # > 2 TTLs: only the heartbeat keeps them
                assert await store.registry_entries() == EXPECTED
                assert await store.registry_reap() == []
                await asyncio.sleep(0.1)
            assert holder.poll() is None, "the holder exited on its own"
            holder.send_signal(signal.SIGKILL)
            holder.wait(timeout=5)
            assert await _wait_for(store, [], timeout_s=1.5) <= 1.5
            assert sorted(await store.registry_reap(), key=lambda e: e.request_id) == EXPECTED
            assert await store.registry_reap() == []
        finally:
            await store.close()
    try:
        asyncio.run(body())
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()


LIVE_TTL_S = 1.0


def test_reaper_never_removes_a_live_holders_entries(store_factory: Any) -> None:
    """A reaper running every 50 ms for 1 s takes only the dead holder's entries; the live one's
    go only after it stops its heartbeat. The live holder's entries live 1 s past each 0.1 s beat
    (a 0.3 s life flaked once on a loaded machine: a beat held up for 0.2 s let them expire)."""
    live = [RegistryEntry("live-1", "live", (0,), 1, 0), RegistryEntry("live-2", "live", (1,), 0, 4)]
    dead = [RegistryEntry("dead-1", "dead", (0, 1), 2, 2)]

    async def heartbeat(store: Any, stop: asyncio.Event) -> None:
        while not stop.is_set():
            await store.registry_refresh("live", LIVE_TTL_S)
            await asyncio.sleep(0.1)

    async def body() -> None:
        store = await store_factory()
        await store.registry_put(live, LIVE_TTL_S)
        await store.registry_put(dead, 0.2)
        stop = asyncio.Event()
        beat = asyncio.create_task(heartbeat(store, stop))
        reaped: list[RegistryEntry] = []
        start = time.monotonic()
        while time.monotonic() - start < 1.0:
            reaped += await store.registry_reap()
            assert {e.request_id for e in await store.registry_entries()} >= {"live-1", "live-2"}
            await asyncio.sleep(0.05)
        assert reaped == dead
        stop.set()
        await beat
        await asyncio.sleep(LIVE_TTL_S + 0.1)            # past the live holder's last deadline
        assert sorted(await store.registry_reap(), key=lambda e: e.request_id) == live
        assert await store.registry_entries() == []
    store_factory.run(body)
