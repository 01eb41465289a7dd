"""Store URLs: ``memory`` (embedded) or ``redis[s]://[user:password@]host[:port][/db][?cluster=name]``."""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import parse_qs, unquote, urlsplit

from store.base import StoreError

_CLUSTER = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")


@dataclass(frozen=True, slots=True)
class StoreUrl:
    kind: str                    # "memory" | "redis"
    url: str = ""                # the redis URL without our own query parameters
    host: str = ""
    port: int = 0
    db: int = 0
    tls: bool = False
    cluster: str = "default"

    @property
    def where(self) -> str:
        return f"{self.host}:{self.port}/{self.db}"


def redact(text: str) -> str:
    """The URL with any password replaced, for messages."""
    return re.sub(r"(://[^/@:]*:)[^/@]*@", r"\1***@", text)


def parse_store_url(text: str) -> StoreUrl:
    """Validate a store URL; a malformed one raises StoreError with one line saying what is wrong."""
    raw = text.strip()
    text = redact(raw)
    if raw in ("memory", "memory://"):
        return StoreUrl("memory")
    try:
        parts = urlsplit(raw)
        port = parts.port
    except ValueError as exc:
        raise StoreError(f"malformed store URL {text!r}: {exc}") from None
    if parts.scheme not in ("redis", "rediss"):
        raise StoreError(f"malformed store URL {text!r}: use memory, redis://host:port/db or rediss://…")
    if not parts.hostname:
        raise StoreError(f"malformed store URL {text!r}: no host")
    path = parts.path.strip("/")
    if path and not path.isdigit():
        raise StoreError(f"malformed store URL {text!r}: database must be a number, got {path!r}")
    query = parse_qs(parts.query)
    unknown = set(query) - {"cluster"}
    if unknown:
        raise StoreError(f"malformed store URL {text!r}: unknown parameter(s) {', '.join(sorted(unknown))}")
    cluster = query.get("cluster", ["default"])[-1]
    if not _CLUSTER.match(cluster):
        raise StoreError(f"malformed store URL {text!r}: cluster name must be 1-64 of [A-Za-z0-9_.-]")
    netloc = parts.netloc
    clean = f"{parts.scheme}://{netloc}/{path or 0}"
    return StoreUrl("redis", clean, unquote(parts.hostname), port or 6379, int(path or 0),
                    parts.scheme == "rediss", cluster)


async def open_store(text: str):  # type: ignore[no-untyped-def]
    """Open (and for Redis, connect to and check) the store a URL names."""
    url = parse_store_url(text)
    if url.kind == "memory":
        from store.memory import MemoryStore
        return MemoryStore()
    from store.redis_store import RedisStore
    return await RedisStore.connect(url)
