"""The knobs record on Redis, as ``knobs.lua`` reads it: its keys, how its state decodes into a
:class:`store.base.KnobsRecord` (a corrupt entry reads as absent, with a note), the history
stream, and the dashboard's synchronous reader.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import redis
from redis import exceptions as rex

from wavepp.store.base import KNOBS_VERSION_MAX, KnobsRecord
from wavepp.store.deployment import Deployment
from wavepp.store.echo import echo
from wavepp.store.redis_records import as_text, lua_script

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
    return decode_knobs([as_text(x) for x in state]), decode_history(rows)


def decode_version(text: str) -> int | None:
    """A stored knobs version, or None when it is not one: plain ASCII digits, at least 1 and below
    :data:`KNOBS_VERSION_MAX` (the next write's version must fit too). The length is checked before
    ``int``, which refuses strings of over 4300 digits with a ValueError of its own."""
    if not (text.isascii() and text.isdigit()) or len(text) > len(str(KNOBS_VERSION_MAX)):
        return None
    version = int(text)
    return version if 1 <= version < KNOBS_VERSION_MAX else None


def decode_knobs(state: Sequence[str]) -> KnobsRecord:
    """The state ``knobs.lua`` reads -> a record. Entries that are not what WavePP writes (another
    client's) read as absent - version 0, no values - with a note saying what was found."""
    knobs_type, version, values, deployment_type, deployment = state
    notes = []
    record = KnobsRecord(0, {})
    if knobs_type == "hash":
        try:
            decoded = json.loads(values)
        except ValueError:                 # JSONDecodeError
            decoded = None
        number = decode_version(version)
        if number is not None and isinstance(decoded, dict):
            record = KnobsRecord(number, decoded)
        else:
            notes.append(f"the knobs record is not valid (version {echo(version)}, values {echo(values)}: "
                         f"expected an integer in [1, {KNOBS_VERSION_MAX}) and a JSON object): read as absent")
    elif knobs_type != "none":
        notes.append(f"the knobs key holds a Redis {knobs_type}, not a hash: read as absent")
    found = None
    if deployment_type == "string":
        try:
            found = Deployment.from_dict(json.loads(deployment))
        except json.JSONDecodeError:
            notes.append(f"the deployment record is not JSON ({echo(deployment)}): read as absent")
        except ValueError as exc:
            notes.append(f"the deployment record is not valid ({exc}): read as absent")
    elif deployment_type != "none":
        notes.append(f"the deployment key holds a Redis {deployment_type}, not a string: read as absent")
    return KnobsRecord(record.version, record.values, found, "; ".join(notes) or None)


def decode_history(rows: Sequence[Any]) -> list[dict[str, Any]]:
    """XREVRANGE rows of the knob history -> entries, oldest first (malformed ones are skipped)."""
    out = []
    for _, f in reversed(rows):
        try:
            out.append({"version": int(f[b"version"]), "time": float(f[b"time"]),
                        "changes": json.loads(f[b"changes"])})
        except (KeyError, ValueError):
            continue
    return out
