"""A store in front of another: every :class:`Store` method written out, each forwarded to ``inner``
through one hook, :meth:`StoreWrapper._call`.

A wrapper - retries through outages (:mod:`store.resilient`), a blocking bridge for virtual time
(:mod:`store.threaded`), modelled round trips (``runtime.engines.coordination.CostedStore``), a
call counter (``runtime.bench.admission``) - overrides the hook, and a method of its own only where
its treatment depends on the arguments. Every call stays typed: no ``__getattr__`` proxy, so a
method missing from a wrapper, or a caller reaching for an attribute the protocol does not have, is
a type error rather than a surprise at run time.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Sequence
from typing import Any, TypeVar

from wavepp.store.base import HintResult, KnobsRecord, KnobValidator, RegistryEntry, Store
from wavepp.store.deployment import Deployment
from wavepp.store.records import StatusSnapshot, WavePlanRecord

T = TypeVar("T")


class StoreWrapper(Store):
    """Forwards every call to ``inner`` through :meth:`_call` (as it is: a wrapper overrides the hook)."""

    def __init__(self, inner: Store) -> None:
        self.inner = inner

    async def _call(self, name: str, call: Callable[[], Coroutine[Any, Any, T]]) -> T:
        """Run one call of the inner store. ``name`` is the method; ``call()`` starts it, and may be
        called again (a retry starts the call anew)."""
        return await call()

    # ---- hint index ------------------------------------------------------------------------
    async def hint_update(self, stage: int, attached: Sequence[int], detached: Sequence[int]) -> None:
        return await self._call("hint_update", lambda: self.inner.hint_update(stage, attached, detached))

    async def hint_update_many(self, updates: Sequence[tuple[int, Sequence[int], Sequence[int]]]) -> None:
        return await self._call("hint_update_many", lambda: self.inner.hint_update_many(updates))

    async def hint_lookup(self, prompts: Sequence[Sequence[int]], stages: Sequence[int]) -> list[HintResult]:
        return await self._call("hint_lookup", lambda: self.inner.hint_lookup(prompts, stages))

    async def hint_count(self, stage: int) -> int:
        return await self._call("hint_count", lambda: self.inner.hint_count(stage))

    async def hint_clear(self) -> None:
        return await self._call("hint_clear", lambda: self.inner.hint_clear())

    # ---- lease/escrow registry -------------------------------------------------------------
    async def registry_put(self, entries: Sequence[RegistryEntry], ttl_s: float) -> None:
        return await self._call("registry_put", lambda: self.inner.registry_put(entries, ttl_s))

    async def registry_refresh(self, holder: str, ttl_s: float) -> None:
        return await self._call("registry_refresh", lambda: self.inner.registry_refresh(holder, ttl_s))

    async def registry_drop(self, holder: str, request_ids: Sequence[str]) -> None:
        return await self._call("registry_drop", lambda: self.inner.registry_drop(holder, request_ids))

    async def registry_entries(self) -> list[RegistryEntry]:
        return await self._call("registry_entries", lambda: self.inner.registry_entries())

    async def registry_reap(self) -> list[RegistryEntry]:
        return await self._call("registry_reap", lambda: self.inner.registry_reap())

    # ---- wave plans ------------------------------------------------------------------------
    async def plan_publish(self, plan: WavePlanRecord) -> None:
        return await self._call("plan_publish", lambda: self.inner.plan_publish(plan))

    async def plan_retire(self, wave_id: int) -> None:
        return await self._call("plan_retire", lambda: self.inner.plan_retire(wave_id))

    async def plans_recent(self, count: int) -> list[WavePlanRecord]:
        return await self._call("plans_recent", lambda: self.inner.plans_recent(count))

    async def plans_in_flight(self) -> list[WavePlanRecord]:
        return await self._call("plans_in_flight", lambda: self.inner.plans_in_flight())

    # ---- knobs -----------------------------------------------------------------------------
    async def knobs_get(self) -> KnobsRecord:
        return await self._call("knobs_get", lambda: self.inner.knobs_get())

    async def knobs_set(self, changes: dict[str, Any], expected_version: int | None = None,
                        deployment: Deployment | None = None, *, validate: KnobValidator,
                        min_version: int = 1) -> KnobsRecord:
        return await self._call("knobs_set", lambda: self.inner.knobs_set(changes, expected_version, deployment,
                                                                          validate=validate, min_version=min_version))

    async def deployment_put(self, deployment: Deployment) -> None:
        return await self._call("deployment_put", lambda: self.inner.deployment_put(deployment))

    async def knobs_history(self, count: int) -> list[dict[str, Any]]:
        return await self._call("knobs_history", lambda: self.inner.knobs_history(count))

    # ---- runtime status ----------------------------------------------------------------------
    async def status_put(self, status: StatusSnapshot) -> None:
        return await self._call("status_put", lambda: self.inner.status_put(status))

    async def status_get(self) -> StatusSnapshot | None:
        return await self._call("status_get", lambda: self.inner.status_get())

    # ---- run descriptions ------------------------------------------------------------------
    async def run_meta_put(self, run_id: str, meta: dict[str, Any]) -> None:
        return await self._call("run_meta_put", lambda: self.inner.run_meta_put(run_id, meta))

    async def run_meta_get(self, run_id: str) -> dict[str, Any] | None:
        return await self._call("run_meta_get", lambda: self.inner.run_meta_get(run_id))

    async def autopilot_put(self, record: dict[str, Any]) -> None:
        return await self._call("autopilot_put", lambda: self.inner.autopilot_put(record))

    async def autopilot_get(self) -> dict[str, Any] | None:
        return await self._call("autopilot_get", lambda: self.inner.autopilot_get())

    async def clear_all(self, keep_knobs: bool = False) -> int:
        return await self._call("clear_all", lambda: self.inner.clear_all(keep_knobs))

    async def close(self) -> None:
        return await self._call("close", lambda: self.inner.close())
