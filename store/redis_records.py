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
from typing import TYPE_CHECKING, Any

from wavepp.store.base import RegistryEntry
from wavepp.store.echo import echo
from wavepp.store.records import StatusSnapshot, WavePlanRecord

if TYPE_CHECKING:
    import redis

# The Redis store's warnings, under its logger's name wherever its records are decoded (log filters
# and the suite's checks name it).
log = logging.getLogger("wavepp.store.redis_store")

RUN_META = "runs:meta"         # run id -> its description (JSON), beside telemetry's ``runs`` (id -> label)
# The longest record a reader parses: a plan, a status snapshot, a run description, the knobs record,
# a knob history entry, the deployment record, a registry entry. WavePP's own are a few kB (a wave of a
# thousand chunks: about 130 kB); a longer one was written by another client and is refused unparsed,
# like a malformed one (Redis keeps strings of up to 512 MB, which json.loads would make far larger).
MAX_RECORD_BYTES = 1 << 20
# A count or stage number in a registry entry: plain ASCII digits, 18 at most (below 2^63).
_NUMBER_DIGITS = 18


def lua_script(name: str) -> str:
    """The text of ``store/lua/<name>``."""
    return (Path(__file__).parent / "lua" / name).read_text()


_reported: set[str] = set()


def report_once(what: str, problem: str) -> None:
    """One warning line per corrupted thing: a store entry read every 50 ms would flood the log."""
    if what not in _reported:
        _reported.add(what)
        log.warning("store: %s %s (written by another client?)", what, problem)


def as_text(value: bytes | str, errors: str = "strict") -> str:
    """A reply as text (redis-py returns bytes unless asked otherwise); ``errors="replace"`` where
    bytes another client wrote are only shown or parsed further, never matched."""
    return value.decode(errors=errors) if isinstance(value, bytes) else value


def load_json(raw: bytes | str) -> Any:
    """A stored JSON text as plain data (dicts, lists, strings, numbers, booleans, None): the only
    way a record read from Redis is parsed - no pickle, eval or YAML anywhere in the store
    (``tests/store/test_plain_data.py``). ValueError saying what is wrong, in a few words, when
    ``raw`` is longer than :data:`MAX_RECORD_BYTES`, not UTF-8, not JSON, or nested past the
    parser's recursion limit (``[[[…`` raised RecursionError out of every reader)."""
    if len(raw) > MAX_RECORD_BYTES:
        unit = "bytes" if isinstance(raw, bytes) else "characters"
        raise ValueError(f"is {len(raw):,} {unit} long, over the limit of {MAX_RECORD_BYTES:,}")
    try:
        return json.loads(raw)
    except RecursionError:
        raise ValueError("is nested too deeply") from None
    except UnicodeDecodeError:
        raise ValueError("is not UTF-8") from None
    except ValueError:                     # JSONDecodeError
        raise ValueError("is not JSON") from None


def entry_text(e: RegistryEntry) -> str:
    """A registry entry as the registry hash keeps it: ``holder|stages|reuse|escrow``."""
    return f"{e.holder}|{','.join(map(str, e.stages))}|{e.reuse_blocks}|{e.escrow_blocks}"


def _number(text: str) -> int:
    """A count or a stage number as :func:`entry_text` writes it; ValueError for anything else
    (a sign, spaces, ``1e9``, full-width digits, an integer longer than :data:`_NUMBER_DIGITS`)."""
    if not (text.isascii() and text.isdigit()) or len(text) > _NUMBER_DIGITS:
        raise ValueError(f"not a count: {echo(text)}")
    return int(text)


def _entry(request_id: str, text: str) -> RegistryEntry:
    holder, stages, reuse, escrow = text.split("|")
    return RegistryEntry(request_id, holder, tuple(_number(s) for s in stages.split(",") if s), _number(reuse),
                         _number(escrow))


def decode_entries(pairs: Iterable[tuple[bytes | str, bytes | str]]) -> list[RegistryEntry]:
    """Registry entries from (request id, text); a malformed or oversized one (another client wrote
    it) is skipped."""
    out = []
    for k, v in pairs:
        try:
            if len(k) + len(v) > MAX_RECORD_BYTES:
                raise ValueError("oversized")
            out.append(_entry(as_text(k), as_text(v)))
        except (ValueError, UnicodeDecodeError):     # UnicodeDecodeError is a ValueError; named for the reader
            report_once(f"registry entry {echo(as_text(k, 'replace'))}",
                        f"is malformed ({echo(as_text(v, 'replace'))}): ignored")
    return out


def decode_plans(raw: Iterable[bytes | str | None]) -> list[WavePlanRecord]:
    """Wave plans from their JSON (:meth:`WavePlanRecord.from_json`); one that is not a JSON object
    (another client wrote it), or is longer than :data:`MAX_RECORD_BYTES`, is skipped."""
    out = []
    for text in raw:
        try:
            data = load_json(text) if text is not None else None
        except ValueError as exc:
            report_once("a wave plan", f"{exc}: ignored")
            continue
        plan = WavePlanRecord.from_json(data)
        if plan is not None:
            out.append(plan)
        else:
            report_once("a wave plan", "is not a JSON object: ignored")
    return out


def decode_run_meta(run_id: str, raw: bytes | str | None) -> dict[str, Any] | None:
    """A run description from its JSON; one that is not a JSON object (another client wrote it), or
    is longer than :data:`MAX_RECORD_BYTES`, is absent."""
    return _json_object(f"the description of run {echo(run_id)}", raw)


def decode_autopilot(raw: bytes | str | None) -> dict[str, Any] | None:
    """The autopilot's settings from their JSON; one that is not a JSON object is absent (reported once)."""
    return _json_object("the autopilot's settings record", raw)


def _json_object(what: str, raw: bytes | str | None) -> dict[str, Any] | None:
    """``raw`` as a JSON object; None when absent, malformed or not an object (``what`` reported once)."""
    if raw is None:
        return None
    try:
        record = load_json(raw)
    except ValueError as exc:
        report_once(what, f"{exc}: ignored")
        return None
    if not isinstance(record, dict):
        report_once(what, "is not a JSON object: ignored")
        return None
    return record


def decode_status(raw: bytes | str | None) -> StatusSnapshot | None:
    """A status snapshot from its JSON (:meth:`StatusSnapshot.from_json`); one that is not a runtime's
    status record (another client wrote it), or is longer than :data:`MAX_RECORD_BYTES`, is absent."""
    if not raw:
        return None
    try:
        data = load_json(raw)
    except ValueError as exc:
        report_once("the status snapshot", f"{exc}: ignored")
        return None
    status = StatusSnapshot.from_json(data)
    if status is None:
        report_once("the status snapshot", "is not a runtime's status record: ignored")
    return status


def read_run_meta(client: redis.Redis, prefix: str, run_id: str) -> dict[str, Any] | None:
    """:meth:`RedisStore.run_meta_get` with a synchronous client (the dashboard); a key of the wrong
    Redis type reads as absent."""
    from redis import exceptions as rex  # here: the in-memory store decodes with this module, without redis

    try:
        raw: Any = client.hget(f"{prefix}:{RUN_META}", run_id)
    except rex.ResponseError as exc:
        if "WRONGTYPE" not in str(exc):
            raise
        return None
    return decode_run_meta(run_id, raw)
