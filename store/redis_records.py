"""The Redis store's records as text: how registry entries, wave plans, status snapshots and run
descriptions are written and read back, shared by :class:`store.redis_store.RedisStore` and the
dashboard's synchronous readers. A record another client corrupted reads as absent (or is skipped),
with one warning line the first time.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import redis
from redis import exceptions as rex

from wavepp.store.base import RegistryEntry
from wavepp.store.records import StatusSnapshot, WavePlanRecord

# The Redis store's warnings, under its logger's name wherever its records are decoded (log filters
# and the suite's checks name it).
log = logging.getLogger("wavepp.store.redis_store")

RUN_META = "runs:meta"         # run id -> its description (JSON), beside telemetry's ``runs`` (id -> label)


def lua_script(name: str) -> str:
    """The text of ``store/lua/<name>``."""
    return (Path(__file__).parent / "lua" / name).read_text()


_reported: set[str] = set()


def report_once(what: str, problem: str) -> None:
    """One warning line per corrupted thing: a store entry read every 50 ms would flood the log."""
    if what not in _reported:
        _reported.add(what)
        log.warning("store: %s %s (written by another client?)", what, problem)


def as_text(value: bytes | str) -> str:
    """A reply as text (redis-py returns bytes unless asked otherwise)."""
    return value.decode() if isinstance(value, bytes) else value


def entry_text(e: RegistryEntry) -> str:
    """A registry entry as the registry hash keeps it: ``holder|stages|reuse|escrow``."""
    return f"{e.holder}|{','.join(map(str, e.stages))}|{e.reuse_blocks}|{e.escrow_blocks}"


def _entry(request_id: str, text: str) -> RegistryEntry:
    holder, stages, reuse, escrow = text.split("|")
    return RegistryEntry(request_id, holder, tuple(int(s) for s in stages.split(",") if s), int(reuse), int(escrow))


def decode_entries(pairs: Iterable[tuple[bytes | str, bytes | str]]) -> list[RegistryEntry]:
    """Registry entries from (request id, text); a malformed one (another client wrote it) is skipped."""
    out = []
    for k, v in pairs:
        try:
            out.append(_entry(as_text(k), as_text(v)))
        except (ValueError, UnicodeDecodeError):
            report_once(f"registry entry {as_text(k)!r}", "is malformed: ignored")
    return out


def decode_plans(raw: Iterable[bytes | str | None]) -> list[WavePlanRecord]:
    """Wave plans from their JSON (:meth:`WavePlanRecord.from_json`); one that is not a JSON object
    (another client wrote it) is skipped."""
    out = []
    for text in raw:
        try:
            data = json.loads(text) if text is not None else None
        except (ValueError, UnicodeDecodeError):
            data = None
        plan = WavePlanRecord.from_json(data)
        if plan is not None:
            out.append(plan)
        else:
            report_once("a wave plan", "is not a JSON object: ignored")
    return out


def decode_run_meta(run_id: str, raw: bytes | str | None) -> dict[str, Any] | None:
    """A run description from its JSON; one that is not a JSON object (another client wrote it) is absent."""
    if raw is None:
        return None
    try:
        meta = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        meta = None
    if not isinstance(meta, dict):
        report_once(f"the description of run {run_id!r}", "is not a JSON object: ignored")
        return None
    return meta


def decode_status(raw: bytes | str | None) -> StatusSnapshot | None:
    """A status snapshot from its JSON (:meth:`StatusSnapshot.from_json`); one that is not a runtime's
    status record (another client wrote it) is absent."""
    if not raw:
        return None
    try:
        data = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        data = None
    status = StatusSnapshot.from_json(data)
    if status is None:
        report_once("the status snapshot", "is not a runtime's status record: ignored")
    return status


def read_run_meta(client: redis.Redis, prefix: str, run_id: str) -> dict[str, Any] | None:
    """:meth:`RedisStore.run_meta_get` with a synchronous client (the dashboard); a key of the wrong
    Redis type reads as absent."""
    try:
        raw: Any = client.hget(f"{prefix}:{RUN_META}", run_id)
    except rex.ResponseError as exc:
        if "WRONGTYPE" not in str(exc):
            raise
        return None
    return decode_run_meta(run_id, raw)
