"""The Redis store: the shared state of a deployment in one Redis (or a Redis Cluster slot).

Keys live under ``wavepp:{<cluster>}:`` - the braces are a hash tag, so Redis Cluster keeps one
deployment's keys in one slot and multi-key scripts stay legal. Every multi-key operation is one
Lua script or one MULTI transaction. The hint lookup for a whole admission round, over every
stage, is one script call (exponential probe + binary search run server-side); block hashes
travel packed as 8-byte words, one argument per prompt, not one per block.

How each record is written and read back lives beside it: :mod:`store.redis_records` (registry
entries, plans, status, run descriptions) and :mod:`store.redis_knobs` (the knobs record and its
history); the dashboard's synchronous readers use the same decoding.
"""

from __future__ import annotations

import json
import re
import struct
from collections.abc import Sequence
from typing import Any

import redis.asyncio as aioredis
from redis import exceptions as rex

from wavepp.store.base import (
    KNOBS_VERSION_MAX,
    RUN_META_CAP,
    HintResult,
    KnobsRecord,
    KnobValidator,
    RegistryEntry,
    StoreError,
)
from wavepp.store.deployment import Deployment
from wavepp.store.records import StatusSnapshot, WavePlanRecord
from wavepp.store.redis_connect import RestartWatch, connect_client
from wavepp.store.redis_errors import translated as _translate
from wavepp.store.redis_knobs import HISTORY_REPLACED, KNOB_HISTORY_CAP, decode_history, decode_knobs, knob_keys
from wavepp.store.redis_records import RUN_META as RUN_META  # a key name bench's reset deletes
from wavepp.store.redis_records import (
    as_text,
    decode_autopilot,
    decode_entries,
    decode_plans,
    decode_run_meta,
    decode_status,
    entry_text,
    lua_script,
    report_once,
)
from wavepp.store.urls import StoreUrl, parse_store_url

PLAN_LOG_CAP = 10_000
# Compare-and-set rounds one knob write may take: each lost round means another write landed in
# between, so this many in a row is a client rewriting the record in a loop, not contention.
KNOB_WRITE_ATTEMPTS = 64
# The Redis type this store keeps under each key (after ``wavepp:{cluster}:``). Knobs and their
# history are the knob schema's (the writer's validator); the span stream is telemetry's.
KEY_TYPES = {"hint:stages": "set", "registry:entries": "hash", "registry:holders": "zset", "plans": "stream",
             "plans:in_flight": "hash", "status": "string", RUN_META: "hash"}
_HINT_STAGE = re.compile(r"hint:\d+")
# The longest wave id a reader sorts by (the loop numbers its waves from 0): a longer "number" in
# the in-flight hash is another client's, sorted first (int() refuses over 4300 digits with an error).
_WAVE_ID_DIGITS = 18


def pack(hashes: Sequence[int]) -> bytes:
    return struct.pack(f"<{len(hashes)}Q", *hashes)


def _wave_order(wave_id: bytes | str) -> int:
    """The in-flight hash's wave ids in wave order; another client's field first (-1)."""
    return int(wave_id) if wave_id.isdigit() and len(wave_id) <= _WAVE_ID_DIGITS else -1


class RedisStore:
    """:class:`store.base.Store` on Redis (redis-py asyncio)."""

    def __init__(self, client: aioredis.Redis, url: StoreUrl) -> None:
        self.client = client
        self.url = url
        self.prefix = f"wavepp:{{{url.cluster}}}"
        self._lookup = client.register_script(lua_script("hint_lookup.lua"))
        self._update = client.register_script(lua_script("hint_update.lua"))
        self._put = client.register_script(lua_script("registry_put.lua"))
        self._reap = client.register_script(lua_script("registry_reap.lua"))
        self._alive = client.register_script(lua_script("registry_alive.lua"))
        self._drop = client.register_script(lua_script("registry_drop.lua"))
        self._knobs = client.register_script(lua_script("knobs.lua"))
        self._run_meta_put = client.register_script(lua_script("run_meta_put.lua"))
        self.restarts: RestartWatch | None = None   # set by connect: the client's reconnects, watched
        self.round_trips = 0                  # calls that went to the server (read on the store itself, never
                                              # through a wrapper; admission-bench counts its own calls)

    @classmethod
    async def connect(cls, url: StoreUrl | str, timeout_s: float = 2.0) -> RedisStore:
        """Connect and PING (:func:`store.redis_connect.connect_client`); unreachable servers, bad
        credentials and TLS trouble raise StoreError (one line)."""
        if isinstance(url, str):
            url = parse_store_url(url)
        watch = RestartWatch()
        store = cls(await connect_client(url, timeout_s, watch), url)
        store.restarts = watch
        return store

    def key(self, *parts: object) -> str:
        return ":".join([self.prefix, *map(str, parts)])

    # ---- hint index ------------------------------------------------------------------------
    @_translate
    async def hint_update(self, stage: int, attached: Sequence[int], detached: Sequence[int]) -> None:
        await self.hint_update_many([(stage, attached, detached)])

    @_translate
    async def hint_update_many(self, updates: Sequence[tuple[int, Sequence[int], Sequence[int]]]) -> None:
        """Several stages' events in one pipelined round trip (each stage's script is atomic)."""
        async with self.client.pipeline(transaction=False) as pipe:   # reset even when the server is gone
            for stage, attached, detached in updates:
                await self._update(keys=[self.key("hint", stage), self.key("hint", "stages")],
                                   args=[stage, pack(attached), pack(detached)], client=pipe)
            self.round_trips += 1
            await pipe.execute()

    @_translate
    async def hint_lookup(self, prompts: Sequence[Sequence[int]], stages: Sequence[int]) -> list[HintResult]:
        stages = list(stages)
        if not prompts:
            return []
        self.round_trips += 1
        flat = await self._lookup(keys=[self.key("hint", s) for s in stages],
                                  args=[len(prompts), *(pack(p) for p in prompts)])
        out, width = [], len(stages) + 1
        for i in range(len(prompts)):
            row = [int(x) for x in flat[i * width:(i + 1) * width]]
            out.append(HintResult(tuple(row[:-1]), row[-1]))
        return out

    @_translate
    async def hint_count(self, stage: int) -> int:
        self.round_trips += 1
        return int(await self.client.hlen(self.key("hint", stage)))

    @_translate
    async def hint_clear(self) -> None:
        stages = await self.client.smembers(self.key("hint", "stages"))
        async with self.client.pipeline(transaction=True) as pipe:
            for s in stages:
                if s.isdigit():                # a stage number; another client's member names no key of ours
                    pipe.delete(self.key("hint", as_text(s)))
            pipe.delete(self.key("hint", "stages"))
            self.round_trips += 2
            await pipe.execute()

    # ---- registry --------------------------------------------------------------------------
    @_translate
    async def registry_put(self, entries: Sequence[RegistryEntry], ttl_s: float) -> None:
        if not entries:
            return
        holders = {e.holder for e in entries}
        if len(holders) != 1:
            raise ValueError("registry_put takes the entries of one holder")
        args: list[Any] = [entries[0].holder, max(1, round(ttl_s * 1000))]
        for e in entries:
            args += [e.request_id, entry_text(e)]
        self.round_trips += 1
        await self._put(keys=[self.key("registry", "entries"), self.key("registry", "holders")], args=args)

    @_translate
    async def registry_refresh(self, holder: str, ttl_s: float) -> None:
        self.round_trips += 1
        await self._put(keys=[self.key("registry", "entries"), self.key("registry", "holders")],
                        args=[holder, max(1, round(ttl_s * 1000))])

    @_translate
    async def registry_drop(self, holder: str, request_ids: Sequence[str]) -> None:
        if request_ids:
            self.round_trips += 1
            await self._drop(keys=[self.key("registry", "entries")], args=[holder, *request_ids])

    @_translate
    async def registry_entries(self) -> list[RegistryEntry]:
        raw = await self.client.hgetall(self.key("registry", "entries"))
        entries = decode_entries(raw.items())
        holders = sorted({e.holder for e in entries})
        alive: set[str] = set()
        if holders:
            alive = set(map(as_text, await self._alive(keys=[self.key("registry", "holders")], args=holders)))
        self.round_trips += 2
        return sorted((e for e in entries if e.holder in alive), key=lambda e: e.request_id)

    @_translate
    async def registry_reap(self) -> list[RegistryEntry]:
        self.round_trips += 1
        flat = await self._reap(keys=[self.key("registry", "entries"), self.key("registry", "holders")])
        return decode_entries((flat[i], flat[i + 1]) for i in range(0, len(flat), 2))

    # ---- plans -----------------------------------------------------------------------------
    @_translate
    async def plan_publish(self, plan: WavePlanRecord) -> None:
        data = json.dumps(plan.to_json(), separators=(",", ":"))
        async with self.client.pipeline(transaction=True) as pipe:
            pipe.xadd(self.key("plans"), {"plan": data}, maxlen=PLAN_LOG_CAP, approximate=True)
            pipe.hset(self.key("plans", "in_flight"), str(plan.wave), data)
            self.round_trips += 1
            await pipe.execute()

    @_translate
    async def plan_retire(self, wave_id: int) -> None:
        self.round_trips += 1
        await self.client.hdel(self.key("plans", "in_flight"), str(wave_id))

    @_translate
    async def plans_recent(self, count: int) -> list[WavePlanRecord]:
        if count <= 0:
            return []
        self.round_trips += 1
        rows: list[Any] = await self.client.xrevrange(self.key("plans"), count=count) or []
        return decode_plans(fields.get(b"plan") for _, fields in reversed(rows))

    @_translate
    async def plans_in_flight(self) -> list[WavePlanRecord]:
        self.round_trips += 1
        raw = await self.client.hgetall(self.key("plans", "in_flight"))
        return decode_plans(raw[k] for k in sorted(raw, key=_wave_order))

    # ---- knobs -----------------------------------------------------------------------------
    def knob_keys(self) -> list[str]:
        return knob_keys(self.prefix)

    async def _knob_state(self) -> list[bytes]:
        """``knobs.lua``'s read, as the server replied: a write hands these bytes back to compare."""
        self.round_trips += 1
        return list(await self._knobs(keys=self.knob_keys(), args=["read"]))

    @_translate
    async def knobs_get(self) -> KnobsRecord:
        return decode_knobs(await self._knob_state())

    @_translate
    async def knobs_set(self, changes: dict[str, Any], expected_version: int | None = None,
                        deployment: Deployment | None = None, *, validate: KnobValidator,
                        min_version: int = 1) -> KnobsRecord:
        for _ in range(KNOB_WRITE_ATTEMPTS):
            state = await self._knob_state()
            current = decode_knobs(state)
            if expected_version is not None and expected_version != current.version:
                raise StoreError(f"knobs changed meanwhile (version {current.version}, expected {expected_version})")
            against = deployment or current.deployment
            values = validate(current.values, changes, against)   # the writer's error: nothing written
            version = max(current.version + 1, min_version)
            self.round_trips += 1
            reply = await self._knobs(keys=self.knob_keys(), args=[
                "write", *state, version, json.dumps(values), json.dumps(changes), KNOB_HISTORY_CAP])
            if reply[0] >= 0:                  # -1: someone wrote in between: read again
                notes = [current.note] + [HISTORY_REPLACED] * reply[1]
                return KnobsRecord(reply[0], values, against, "; ".join(n for n in notes if n) or None)
            if reply[0] == -2:                 # a min_version out of bounds (current + 1 is in: decode_version)
                raise StoreError(f"redis at {self.url.where}: the knobs script refused record number "
                                 f"{version} (out of [1, {KNOBS_VERSION_MAX}])")
            if expected_version is not None:
                raise StoreError("knobs changed meanwhile; read them again")
        raise StoreError(f"the knobs record kept changing during {KNOB_WRITE_ATTEMPTS} write attempts in a row "
                         "(another client rewriting it in a loop?): nothing written")

    @_translate
    async def knobs_history(self, count: int) -> list[dict[str, Any]]:
        if count <= 0:
            return []
        self.round_trips += 1
        try:
            rows: list[Any] = await self.client.xrevrange(self.key("knobs", "history"), count=count) or []
        except rex.ResponseError as exc:
            if "WRONGTYPE" not in str(exc):
                raise
            rows = []                      # corrupt: absent; the next knob write replaces it
        return decode_history(rows)

    @_translate
    async def deployment_put(self, deployment: Deployment) -> None:
        self.round_trips += 1
        await self.client.set(self.key("deployment"), json.dumps(deployment.as_dict()))

    # ---- status ----------------------------------------------------------------------------
    @_translate
    async def status_put(self, status: StatusSnapshot) -> None:
        self.round_trips += 1
        await self.client.set(self.key("status"), json.dumps(status.to_json(), separators=(",", ":")))

    @_translate
    async def status_get(self) -> StatusSnapshot | None:
        self.round_trips += 1
        return decode_status(await self.client.get(self.key("status")))

    # ---- run descriptions ------------------------------------------------------------------
    @_translate
    async def run_meta_put(self, run_id: str, meta: dict[str, Any]) -> None:
        self.round_trips += 1
        await self._run_meta_put(keys=[self.key(RUN_META)],
                                 args=[run_id, json.dumps(meta, separators=(",", ":")), RUN_META_CAP])

    @_translate
    async def run_meta_get(self, run_id: str) -> dict[str, Any] | None:
        self.round_trips += 1
        return decode_run_meta(run_id, await self.client.hget(self.key(RUN_META), run_id))

    # ---- the autopilot's settings -----------------------------------------------------------
    @_translate
    async def autopilot_put(self, record: dict[str, Any]) -> None:
        self.round_trips += 1
        await self.client.set(self.key("autopilot"), json.dumps(record, separators=(",", ":")))

    @_translate
    async def autopilot_get(self) -> dict[str, Any] | None:
        self.round_trips += 1
        return decode_autopilot(await self.client.get(self.key("autopilot")))

    # ---- housekeeping ----------------------------------------------------------------------
    async def heal(self) -> bool:
        """Delete this deployment's keys that hold the wrong Redis type (another client wrote them),
        one warning line each: they are then absent - the hint index refills from the stages'
        attaches, the registry from the next heartbeat and admissions, plans from the next waves.
        True when a key was deleted."""
        healed = False
        async for key in self.client.scan_iter(match=f"{self.prefix}:*", count=1000):
            name = as_text(key, "replace").removeprefix(f"{self.prefix}:")
            expected = "hash" if _HINT_STAGE.fullmatch(name) else KEY_TYPES.get(name)
            if expected is None:
                continue
            found = as_text(await self.client.type(key))
            if found not in (expected, "none"):
                await self.client.delete(key)
                report_once(as_text(key, "replace"),
                            f"held a {found} instead of a {expected}: deleted, treated as absent")
                healed = True
        return healed

    @_translate
    async def clear_all(self, keep_knobs: bool = False) -> int:
        """Delete every key of this deployment (tests, fresh benchmark runs) except the span stream, its
        run index (telemetry owns them) and the run descriptions, whose entries carry their run's id;
        with ``keep_knobs`` the knobs and their history stay too."""
        kept = {self.key("spans"), self.key("runs"), self.key(RUN_META)}
        if keep_knobs:
            kept |= {self.key("knobs"), self.key("knobs", "history"), self.key("autopilot")}
        keys = [k async for k in self.client.scan_iter(match=f"{self.prefix}:*", count=1000)
                if k.decode(errors="replace") not in kept]          # another client's key name need not be UTF-8
        if keys:
            await self.client.delete(*keys)
        return len(keys)

    def take_restart(self) -> bool:
        """Whether the server restarted since the last call (:class:`store.redis_connect.RestartWatch`; a store
        made from a client of its own sees none)."""
        return self.restarts is not None and self.restarts.take()

    async def drop_pooled_connections(self) -> None:
        """Close every pooled connection not in use (:class:`store.resilient.PooledStore`): after an
        outage they may all be dead, and each would fail the first call that picks it."""
        try:
            await self.client.connection_pool.disconnect(inuse_connections=False)
        except (rex.RedisError, OSError):      # a socket that cannot even be closed: the pool forgot it anyway
            pass

    async def close(self) -> None:
        await self.client.aclose()
