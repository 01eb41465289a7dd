"""The runtime's status snapshots: queue depths, the ring, the knobs' version and each stage's cache counts,
taken every :data:`STATUS_EVERY_S` while a run goes (to the store for the dashboard, to the metrics as gauges)
and once more when it ends, with how it ended."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence

from wavepp.runtime.clock import sleep
from wavepp.runtime.completion import LoopResult
from wavepp.runtime.control.plane import KnobWatcher, StoreWriter
from wavepp.runtime.in_force import InForce
from wavepp.runtime.kvcache.handle import StageHandle
from wavepp.runtime.run_state import RunState
from wavepp.store.base import Store
from wavepp.store.records import StageStatus, StatusSnapshot
from wavepp.telemetry.setup import Telemetry

log = logging.getLogger(__name__)

STATUS_EVERY_S = 0.25


async def stage_statuses(handles: Sequence[StageHandle]) -> tuple[StageStatus, ...]:
    """Per stage: blocks, cached, free, leases, escrowed blocks and evictions so far (one message each)."""
    stats = await asyncio.gather(*(h.stats() for h in handles))
    return tuple(StageStatus(h.stage, st.num_blocks, st.num_cached, st.num_free, st.num_leases,
                             st.num_escrowed_blocks, st.num_evictions)
                 for h, st in zip(handles, stats, strict=True))


class RunStatus:
    def __init__(self, handles: Sequence[StageHandle], run_state: RunState, in_force: InForce,
                 knob_watcher: KnobWatcher, result: LoopResult, telemetry: Telemetry, store: Store,
                 writer: StoreWriter) -> None:
        self.handles = list(handles)
        self.run_state = run_state
        self.in_force = in_force
        self.knob_watcher = knob_watcher
        self.result = result
        self.tel = telemetry
        self.store = store
        self.writer = writer

    async def snapshot(self, state: str = "running") -> StatusSnapshot:
        """A snapshot of queues and per-stage cache state (the dashboard's Cache and Admission pages),
        with the run's id (runs sharing a store never mix), the wall-clock time it was taken (a viewer
        tells a silent runtime from a busy one) and the runtime's state: running, finished or failed."""
        stages = await stage_statuses(self.handles)
        run = self.run_state
        return StatusSnapshot(t=self.tel.now_ns(), run=self.tel.run_id, wall=time.time(), state=state,
                              policy=self.in_force.policy.name, waiting=run.num_waiting, active=run.num_active,
                              in_flight=run.in_flight, ring=self.in_force.ring, finished=run.num_ended,
                              failed=self.result.num_failed, knobs_version=self.knob_watcher.version,
                              knobs_refused=self.knob_watcher.refused, stages=stages)

    async def every(self) -> None:
        """A task of the run: a snapshot every STATUS_EVERY_S, kept, to the metrics and (off the critical
        path) to the store."""
        while True:
            snapshot = await self.snapshot()
            self.tel.status(snapshot)           # queue depths and KV blocks become metric gauges
            self.result.status.append(snapshot)
            self.writer.submit(lambda snapshot=snapshot: self.store.status_put(snapshot))  # type: ignore[misc]
            await sleep(STATUS_EVERY_S)

    async def final(self, state: str) -> None:
        """The last snapshot, saying how the run ended. Best effort: a store that is down, or stages that
        died, must not hide the run's own error."""
        try:
            snapshot = await asyncio.wait_for(self.snapshot(state), STATUS_EVERY_S * 4)
            self.result.status.append(snapshot)
            self.tel.status(snapshot)
            await asyncio.wait_for(self.store.status_put(snapshot), STATUS_EVERY_S * 4)
        except Exception as exc:                 # noqa: BLE001 - reported, never raised over the run's outcome
            # After a failure the cause is mostly the same (the store gone, a stage dead) and the run's
            # own error line says it: not a second line on the terminal then.
            report = log.warning if state == "finished" else log.debug
            report("could not record the run's final status (%s): %s", state, exc)
