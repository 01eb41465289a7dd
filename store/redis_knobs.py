"""The knobs record on Redis, as ``knobs.lua`` reads it: its keys, how its state decodes into a
:class:`store.base.KnobsRecord` (a corrupt entry reads as absent, with a note), the history
stream, and the dashboard's synchronous reader.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import redis
from redis import exceptions as rex

from wavepp.store.base import KNOBS_VERSION_MAX, KnobsRecord
from wavepp.store.deployment import Deployment
from wavepp.store.echo import echo
from wavepp.store.redis_records import as_text, load_json, lua_script

KNOB_HISTORY_CAP = 1_000
HISTORY_REPLACED = "the knob history was not a stream (another client wrote that key): started a new one"


def knob_keys(prefix: str) -> list[str]:
    """The knobs hash, its history stream and the deployment record (``knobs.lua``'s KEYS)."""
    return [f"{prefix}:knobs", f"{prefix}:knobs:history", f"{prefix}:deployment"]


def read_knobs(client: redis.Redis, prefix: str, count: int) -> tuple[KnobsRecord, list[dict[str, Any]]]:
    """The record and its last ``count`` history entries with a synchronous client (the dashboard),
    decoded as :class:`RedisStore` decodes them: corrupt entries read as absent."""
    state = client.register_script(lua_script("knobs.lua"))(keys=knob_keys(prefix), args=["read"])
    try:
        rows: Any = client.xrevrange(f"{prefix}:knobs:history", count=count) or []
    except rex.ResponseError as exc:
        if "WRONGTYPE" not in str(exc):
            raise
        rows = []
    return decode_knobs(state), decode_history(rows)


def decode_version(text: str) -> int | None:
    """A stored knobs version, or None when it is not one: plain ASCII digits, at least 1 and below
    :data:`KNOBS_VERSION_MAX` (the next write's version must fit too). The length is checked before
    ``int``, which refuses strings of over 4300 digits with a ValueError of its own."""
    if not (text.isascii() and text.isdigit()) or len(text) > len(str(KNOBS_VERSION_MAX)):
        return None
    version = int(text)
    return version if 1 <= version < KNOBS_VERSION_MAX else None


def decode_knobs(state: Sequence[bytes | str]) -> KnobsRecord:
    """The state ``knobs.lua`` reads -> a record. Entries that are not what WavePP writes (another
    client's: not UTF-8, not JSON, too long) read as absent - version 0, no values - with a note
    saying what was found. The values and the deployment are parsed as they came (bytes): text with
    replacement characters would parse; the rest is only shown."""
    knobs_type, version, deployment_type = (as_text(state[i], "replace") for i in (0, 1, 3))
    values, deployment = state[2], state[4]
    notes = []
    record = KnobsRecord(0, {})
    if knobs_type == "hash":
        why = ""
        try:
            decoded = load_json(values)
        except ValueError as exc:          # not JSON, or too long to parse
            decoded, why = None, f", which {exc}"
        number = decode_version(version)
        if number is not None and isinstance(decoded, dict):
            record = KnobsRecord(number, decoded)
        else:
            shown = echo(as_text(values, "replace"))
            notes.append(f"the knobs record is not valid (version {echo(version)}, values {shown}{why}: "
                         f"expected an integer in [1, {KNOBS_VERSION_MAX}) and a JSON object): read as absent")
    elif knobs_type != "none":
        notes.append(f"the knobs key holds a Redis {knobs_type}, not a hash: read as absent")
    found = None
    if deployment_type == "string":
        try:
            data = load_json(deployment)
        except ValueError as exc:          # not JSON, or too long to parse
            notes.append(f"the deployment record {exc} ({echo(as_text(deployment, 'replace'))}): read as absent")
        else:
            try:
                found = Deployment.from_dict(data)
            except ValueError as exc:
                notes.append(f"the deployment record is not valid ({exc}): read as absent")
    elif deployment_type != "none":
        notes.append(f"the deployment key holds a Redis {deployment_type}, not a string: read as absent")
    return KnobsRecord(record.version, record.values, found, "; ".join(notes) or None)


def decode_history(rows: Sequence[Any]) -> list[dict[str, Any]]:
    """XREVRANGE rows of the knob history -> entries, oldest first. Malformed ones (another client's:
    a field missing or not a number, changes that are not a JSON object or too long to parse) are
    skipped: the readers show ``changes`` as name=value pairs."""
    out = []
    for _, f in reversed(rows):
        try:
            entry = {"version": int(f[b"version"]), "time": float(f[b"time"]), "changes": load_json(f[b"changes"])}
        except (KeyError, ValueError):
            continue
        if isinstance(entry["changes"], dict):
            out.append(entry)
    return out
