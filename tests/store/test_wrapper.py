"""StoreWrapper writes out every Store method and forwards each through its one hook; the store's
wrappers are typed subclasses of it, never ``__getattr__`` proxies."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from wavepp.runtime.bench.admission import CountingStore
from wavepp.runtime.control.knobs import Deployment, validated_values
from wavepp.runtime.engines.coordination import CostedStore
from wavepp.store.base import RegistryEntry, Store
from wavepp.store.memory import MemoryStore
from wavepp.store.records import StatusSnapshot, WavePlanRecord
from wavepp.store.resilient import ResilientStore
from wavepp.store.threaded import ThreadedStore
from wavepp.store.wrapper import StoreWrapper

T = TypeVar("T")
PROTOCOL = sorted(name for name, value in vars(Store).items() if inspect.iscoroutinefunction(value))


class Recording(StoreWrapper):
    def __init__(self, inner: Store) -> None:
        super().__init__(inner)
        self.names: list[str] = []

    async def _call(self, name: str, call: Callable[[], Coroutine[Any, Any, T]]) -> T:
        self.names.append(name)
        return await call()


def test_every_protocol_method_is_written_out_and_the_wrappers_only_override() -> None:
    assert len(PROTOCOL) == 26                       # the protocol as the script below calls it
    assert [n for n in PROTOCOL if n not in vars(StoreWrapper)] == []        # none inherits the protocol's `...`
    for cls in (ResilientStore, ThreadedStore, CostedStore, CountingStore):
        assert issubclass(cls, StoreWrapper) and "__getattr__" not in vars(cls), cls
        assert "_call" in vars(cls), cls


async def _script(store: Store) -> list[Any]:
    """One call of every protocol method, close last; their results."""
    entry = RegistryEntry("r1", "A", (0, 1), 2, 3)
    return [
        await store.hint_update(0, [1, 2, 3], []),
        await store.hint_update_many([(1, [1, 2], []), (0, [], [3])]),
        await store.hint_lookup([[1, 2, 3]], [0, 1]),
        await store.hint_count(0),
        await store.registry_put([entry], 60.0),
        await store.registry_refresh("A", 60.0),
        await store.registry_entries(),
        await store.registry_drop("A", ["r1"]),
        await store.registry_reap(),
        await store.plan_publish(WavePlanRecord(1)),
        await store.plans_in_flight(),
        await store.plan_retire(1),
        await store.plans_recent(5),
        await store.deployment_put(Deployment(64, 2)),
        (await store.knobs_set({"ring": 4}, None, Deployment(64, 2), validate=validated_values)).values,
        await store.knobs_get(),
        [h["changes"] for h in await store.knobs_history(5)],
        await store.status_put(StatusSnapshot(1)),
        await store.status_get(),
        await store.run_meta_put("run-1", {"pp": 2}),
        await store.run_meta_get("run-1"),
        await store.autopilot_put({"mode": "advise"}),
        await store.autopilot_get(),
        await store.hint_clear(),
        await store.clear_all(keep_knobs=True),
        await store.close(),
    ]


def test_each_method_goes_through_the_hook_under_its_name_and_returns_the_inner_result() -> None:
    async def body() -> tuple[list[Any], list[Any], list[str]]:
        wrapped = Recording(MemoryStore())
        return await _script(MemoryStore()), await _script(wrapped), wrapped.names

    direct, through, names = asyncio.run(body())
    assert through == direct
    assert sorted(names) == PROTOCOL and len(names) == len(PROTOCOL)
