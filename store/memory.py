"""The embedded store: everything in this process's memory. Not shared between processes.

Time-to-live uses the running event loop's clock, so registry expiry follows virtual time on
the sim engine and wall time on real ones.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
from collections import deque
from collections.abc import Sequence
from typing import Any

from wavepp.store.base import RUN_META_CAP, HintResult, KnobsRecord, KnobValidator, RegistryEntry, StoreError
from wavepp.store.deployment import Deployment
from wavepp.store.probe import longest_prefix_in
from wavepp.store.records import StatusSnapshot, WavePlanRecord
from wavepp.store.redis_records import decode_autopilot

PLAN_LOG_CAP = 10_000
KNOB_HISTORY_CAP = 1_000


def _clock() -> float:
    try:
        return asyncio.get_running_loop().time()
    except RuntimeError:
        return time.monotonic()


class MemoryStore:
    """In-process :class:`store.base.Store`."""

    def __init__(self) -> None:
        self._counts: dict[int, dict[int, int]] = {}
        self._holders: dict[str, float] = {}                 # holder -> heartbeat deadline
        self._entries: dict[str, RegistryEntry] = {}
        self._plans: deque[WavePlanRecord] = deque(maxlen=PLAN_LOG_CAP)
        self._in_flight: dict[int, WavePlanRecord] = {}
        self._knobs = KnobsRecord(0, {})
        self._knob_history: deque[dict[str, Any]] = deque(maxlen=KNOB_HISTORY_CAP)
        self._status: StatusSnapshot | None = None
        self._autopilot: str | None = None                   # the autopilot's settings as JSON (Redis's shape)
        self._run_meta: dict[str, str] = {}                  # run id -> its description as JSON (Redis's shape)

    def _stage(self, stage: int) -> dict[int, int]:
        return self._counts.setdefault(stage, {})

    # ---- hint index ------------------------------------------------------------------------
    async def hint_update(self, stage: int, attached: Sequence[int], detached: Sequence[int]) -> None:
        counts = self._stage(stage)
        get, pop = counts.get, counts.pop
        for h in attached:
            counts[h] = get(h, 0) + 1
        for h in detached:
            n = pop(h, 0) - 1                       # usually 0 now: gone from the index
            if n > 0:
                counts[h] = n

    async def hint_update_many(self, updates: Sequence[tuple[int, Sequence[int], Sequence[int]]]) -> None:
        for stage, attached, detached in updates:
            await self.hint_update(stage, attached, detached)

    async def hint_lookup(self, prompts: Sequence[Sequence[int]], stages: Sequence[int]) -> list[HintResult]:
        out = []
        tables = [self._stage(s) for s in stages]
        for hashes in prompts:
            probes = 0
            per_stage = []
            n = 0
            for counts in tables:                   # each stage's search starts at the one before's answer
                n, p = longest_prefix_in(hashes, counts, guess=n)
                per_stage.append(n)
                probes += p
            out.append(HintResult(tuple(per_stage), probes))
        return out

    async def hint_count(self, stage: int) -> int:
        return len(self._stage(stage))

    async def hint_clear(self) -> None:
        self._counts.clear()

    def resident_count(self, stage: int) -> int:
        """Synchronous :meth:`hint_count` for tests."""
        return len(self._stage(stage))

    # ---- registry --------------------------------------------------------------------------
    def _alive(self, holder: str) -> bool:
        return self._holders.get(holder, float("-inf")) > _clock()

    async def registry_put(self, entries: Sequence[RegistryEntry], ttl_s: float) -> None:
        for e in entries:
            self._entries[e.request_id] = e
            self._holders[e.holder] = _clock() + ttl_s

    async def registry_refresh(self, holder: str, ttl_s: float) -> None:
        self._holders[holder] = _clock() + ttl_s

    async def registry_drop(self, holder: str, request_ids: Sequence[str]) -> None:
        for rid in request_ids:
            e = self._entries.get(rid)
            if e is not None and e.holder == holder:
                del self._entries[rid]

    async def registry_entries(self) -> list[RegistryEntry]:
        return [e for e in self._entries.values() if self._alive(e.holder)]

    async def registry_reap(self) -> list[RegistryEntry]:
        dead = [e for e in self._entries.values() if not self._alive(e.holder)]
        for e in dead:
            del self._entries[e.request_id]
        return dead

    # ---- plans -----------------------------------------------------------------------------
    async def plan_publish(self, plan: WavePlanRecord) -> None:
        self._plans.append(plan)
        self._in_flight[plan.wave] = plan

    async def plan_retire(self, wave_id: int) -> None:
        self._in_flight.pop(wave_id, None)

    async def plans_recent(self, count: int) -> list[WavePlanRecord]:
        return list(self._plans)[-count:] if count > 0 else []

    async def plans_in_flight(self) -> list[WavePlanRecord]:
        return [self._in_flight[w] for w in sorted(self._in_flight)]

    # ---- knobs -----------------------------------------------------------------------------
    async def knobs_get(self) -> KnobsRecord:
        return self._knobs

    async def knobs_set(self, changes: dict[str, Any], expected_version: int | None = None,
                        deployment: Deployment | None = None, *, validate: KnobValidator,
                        min_version: int = 1) -> KnobsRecord:
        current = self._knobs
        if expected_version is not None and expected_version != current.version:
            raise StoreError(f"knobs changed meanwhile (version {current.version}, expected {expected_version})")
        against = deployment or current.deployment
        values = validate(current.values, changes, against)       # the writer's error: nothing written
        self._knobs = KnobsRecord(max(current.version + 1, min_version), values, current.deployment)
        self._knob_history.append({"version": self._knobs.version, "time": time.time(), "changes": dict(changes)})
        return dataclasses.replace(self._knobs, deployment=against)

    async def knobs_history(self, count: int) -> list[dict[str, Any]]:
        return list(self._knob_history)[-count:] if count > 0 else []

    async def deployment_put(self, deployment: Deployment) -> None:
        self._knobs = dataclasses.replace(self._knobs, deployment=deployment)

    # ---- status ----------------------------------------------------------------------------
    async def status_put(self, status: StatusSnapshot) -> None:
        self._status = status

    async def status_get(self) -> StatusSnapshot | None:
        return self._status

    # ---- run descriptions ------------------------------------------------------------------
    async def run_meta_put(self, run_id: str, meta: dict[str, Any]) -> None:
        self._run_meta[run_id] = json.dumps(meta, separators=(",", ":"))
        for old in sorted(self._run_meta)[:-RUN_META_CAP]:
            del self._run_meta[old]

    async def run_meta_get(self, run_id: str) -> dict[str, Any] | None:
        text = self._run_meta.get(run_id)
        return json.loads(text) if text is not None else None

    # ---- the autopilot's settings -----------------------------------------------------------
    async def autopilot_put(self, record: dict[str, Any]) -> None:
        self._autopilot = json.dumps(record, separators=(",", ":"))

    async def autopilot_get(self) -> dict[str, Any] | None:
        return decode_autopilot(self._autopilot)

    async def clear_all(self, keep_knobs: bool = False) -> int:
        """Forget everything but the run descriptions, the knobs too unless ``keep_knobs`` (the Redis
        store deletes its keys)."""
        n = len(self._counts) + len(self._entries) + len(self._plans)
        knobs, history, described, pilot = self._knobs, self._knob_history, self._run_meta, self._autopilot
        self.__init__()  # type: ignore[misc]
        self._run_meta = described
        if keep_knobs:
            self._knobs, self._knob_history, self._autopilot = knobs, history, pilot
        return n

    async def close(self) -> None:
        return None
