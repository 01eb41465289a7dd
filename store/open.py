"""Open the store a URL names: the embedded memory store, or a Redis store connected and checked.

Its own module because it needs both implementations, and the Redis store needs the URLs: in
``store/urls.py`` it closed an import circle (urls -> redis_store -> urls).
"""

from __future__ import annotations

from wavepp.store.base import Store
from wavepp.store.memory import MemoryStore
from wavepp.store.redis_store import RedisStore
from wavepp.store.urls import parse_store_url


async def open_store(text: str) -> Store:
    """Open (and for Redis, connect to and check) the store a URL names. A malformed URL, an
    unreachable server or bad credentials raise StoreError (one line)."""
    url = parse_store_url(text)
    if url.kind == "memory":
        return MemoryStore()
    return await RedisStore.connect(url)
