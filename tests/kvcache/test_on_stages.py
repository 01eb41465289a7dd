"""on_stages: one operation on several stages - a task a stage only where an operation may wait."""

from __future__ import annotations

import asyncio

from wavepp.runtime.engines.coordination import DEFAULT_COSTS, SimCostHook
from wavepp.runtime.kvcache.handle import StageHandle, on_stages
from wavepp.runtime.kvcache.stage_cache import StageCache


class _Remote(StageHandle):
    """An in-process cache that says it is in another process (as RemoteStageHandle does)."""

    @property
    def remote(self) -> bool:
        return True


def _tasks(handles: list[StageHandle], charged: bool) -> list[bool]:
    """Per stage: whether the operation ran in a task other than the caller's."""

    async def main() -> list[bool]:
        caller = asyncio.current_task()

        async def op(h: StageHandle) -> bool:
            await h.drain_index_updates()
            return asyncio.current_task() is not caller

        return await on_stages(handles, op, charged=charged)

    return asyncio.run(main())


def test_a_charged_operation_runs_concurrently_where_a_stage_charges_time() -> None:
    hook = SimCostHook(DEFAULT_COSTS)
    assert _tasks([StageHandle(StageCache(s, 8, 4), hook) for s in range(3)], charged=True) == [True] * 3
    assert _tasks([StageHandle(StageCache(s, 8, 4)) for s in range(3)], charged=True) == [False] * 3


def test_an_uncharged_operation_waits_only_on_a_stage_in_another_process() -> None:
    hook = SimCostHook(DEFAULT_COSTS)
    assert _tasks([StageHandle(StageCache(s, 8, 4), hook) for s in range(3)], charged=False) == [False] * 3
    handles = [StageHandle(StageCache(0, 8, 4), hook), _Remote(StageCache(1, 8, 4), hook)]
    assert _tasks(handles, charged=False) == [True, True]
