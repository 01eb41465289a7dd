"""Store URLs: ``memory`` (embedded) or
``redis[s]://[user:password@]host[:port][/db][?cluster=name][&ssl_ca_certs=PATH][&ssl_cert_reqs=required]``."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from urllib.parse import parse_qs, unquote, urlencode, urlsplit

from wavepp.store.base import StoreError

_CLUSTER = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
# redis-py's TLS settings a ``rediss://`` URL may carry, under redis-py's own names: they stay in the
# URL handed to ``redis.from_url``, which reads them (so every client built from ``StoreUrl.url`` -
# the store, the span exporter, the dashboard's readers - trusts the same CA).
TLS_PARAMETERS = ("ssl_ca_certs", "ssl_cert_reqs")
CERT_REQS = ("required", "optional", "none")
# ``scheme://[user]:password@``: the password runs to the last "@" before a space or a quote, as
# urlsplit reads it, so one with an unescaped "@" or "/" is hidden whole, never in part.
_PASSWORD = re.compile(r"(\b[A-Za-z][A-Za-z0-9+.-]*://[^\s\"<>/@:]*:)[^\s\"<>]*@")


@dataclass(frozen=True, slots=True)
class StoreUrl:
    kind: str                    # "memory" | "redis"
    # The redis URL without our own query parameters, password included: for redis-py only, never
    # shown (not in the repr either); what a person or a file sees is :attr:`shown`.
    url: str = field(default="", repr=False)
    host: str = ""
    port: int = 0
    db: int = 0
    tls: bool = False
    cluster: str = "default"

    @property
    def where(self) -> str:
        return f"{self.host}:{self.port}/{self.db}"

    @property
    def shown(self) -> str:
        """The store as printed, logged, put in a run's label or on a page: ``memory`` or the URL
        with its password hidden (``redis://:***@host:6379/0?cluster=name``)."""
        if self.kind == "memory":
            return "memory"
        userinfo, at, _ = urlsplit(self.url).netloc.rpartition("@")
        return redact(f"{'rediss' if self.tls else 'redis'}://{userinfo}{at}{self.where}?cluster={self.cluster}")


def redact(text: str) -> str:
    """``text`` with the password of every URL in it replaced by ``***`` (``redis://:***@host``,
    ``rediss://user:***@host``; the user name stays). The one redaction: whatever may show a store
    URL (output, logs, pages, run labels, spans) passes it through here or uses ``StoreUrl.shown``."""
    return _PASSWORD.sub(r"\1***@", text)


def parse_store_url(text: str) -> StoreUrl:
    """Validate a store URL; a malformed one raises StoreError with one line saying what is wrong."""
    raw = text.strip()
    text = redact(raw)
    if len(text) > 120:                      # a message echoes the URL bounded, however long it came
        text = f"{text[:100]}… ({len(text)} characters)"
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
    query = parse_qs(parts.query, keep_blank_values=True)    # cluster= is an empty name, not no name
    unknown = set(query) - {"cluster", *TLS_PARAMETERS}
    if unknown:
        raise StoreError(f"malformed store URL {text!r}: unknown parameter(s) {', '.join(sorted(unknown))}")
    cluster = query.get("cluster", ["default"])[-1]
    if not _CLUSTER.match(cluster):
        raise StoreError(f"malformed store URL {text!r}: cluster name must be 1-64 of [A-Za-z0-9_.-]")
    tls = {name: query[name][-1] for name in TLS_PARAMETERS if name in query}
    _check_tls(text, parts.scheme, tls)
    netloc = parts.netloc
    clean = f"{parts.scheme}://{netloc}/{path or 0}" + (f"?{urlencode(tls)}" if tls else "")
    return StoreUrl("redis", clean, unquote(parts.hostname), port or 6379, int(path or 0),
                    parts.scheme == "rediss", cluster)


def _check_tls(text: str, scheme: str, tls: dict[str, str]) -> None:
    """The TLS parameters make sense: only on ``rediss://``, a known verify mode, a CA file that is there."""
    if tls and scheme != "rediss":
        raise StoreError(f"malformed store URL {text!r}: {', '.join(tls)} needs rediss:// (TLS)")
    if tls.get("ssl_cert_reqs", "required") not in CERT_REQS:
        raise StoreError(f"malformed store URL {text!r}: ssl_cert_reqs must be one of {', '.join(CERT_REQS)}")
    ca = tls.get("ssl_ca_certs")
    if ca is not None and not os.path.isfile(ca):
        raise StoreError(f"malformed store URL {text!r}: ssl_ca_certs: no file {ca!r}")
