"""The runtime's side of the shared store, kept off the critical path.

* :class:`StoreWriter` - an ordered queue of store writes (wave plans, registry entries) run by one
  background task; the dispatcher and the stages never wait for a store round trip.
* :class:`LeaseRegistry` - records, per admitted request, which stages hold its lease and escrow,
  under this leader's id; a heartbeat keeps the entries alive. A reaper releases the local pins of
  requests whose holder died (its heartbeat expired), so a dead leader's pins never leak.
* :class:`KnobWatcher` - polls the store's knob record and hands a new version to the loop, which
  applies it at the next wave boundary.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable, Sequence

from runtime.engines.base import StageHandle
from runtime.knobs import KnobError, Knobs, from_dict
from runtime.request import AdmittedRequest
from store.base import RegistryEntry, Store

log = logging.getLogger(__name__)

LEASE_TTL_S = 10.0          # a holder silent this long is dead; its pins are released
HEARTBEAT_S = LEASE_TTL_S / 4
REAP_S = LEASE_TTL_S / 2
KNOB_POLL_S = 0.05          # knobs reach the runtime within a wave (waves take tens of ms and more)


class StoreWriter:
    """Runs submitted store writes one at a time, in order, in the background."""

    def __init__(self) -> None:
        self._queue: asyncio.Queue[Callable[[], Awaitable[object]]] = asyncio.Queue()
        self.failures = 0

    def submit(self, write: Callable[[], Awaitable[object]]) -> None:
        self._queue.put_nowait(write)

    async def run(self) -> None:
        while True:
            write = await self._queue.get()
            try:
                await write()
            except Exception:            # a write that cannot succeed must not stop the others
                self.failures += 1
                log.exception("store write failed")
            finally:
                self._queue.task_done()

    async def drain(self) -> None:
        await self._queue.join()


class LeaseRegistry:
    def __init__(self, store: Store, writer: StoreWriter, holder: str | None = None) -> None:
        self.store = store
        self.writer = writer
        self.holder = holder or f"leader-{uuid.uuid4().hex[:12]}"

    def admitted(self, requests: Sequence[AdmittedRequest], num_stages: int, block_size: int) -> None:
        entries = [RegistryEntry(a.id, self.holder, a.admit_stages, a.reuse_blocks,
                                 -(-(a.request.num_tokens - a.reused_tokens) // block_size)) for a in requests]
        if entries:
            self.writer.submit(lambda: self.store.registry_put(entries, LEASE_TTL_S))

    def released(self, request_id: str) -> None:
        self.writer.submit(lambda: self.store.registry_drop(self.holder, [request_id]))

    async def heartbeat(self) -> None:
        while True:
            await self.store.registry_refresh(self.holder, LEASE_TTL_S)
            await asyncio.sleep(HEARTBEAT_S)

    async def reaper(self, handles: Sequence[StageHandle], on_release: Callable[[], None]) -> None:
        """Release pins on local stages for requests whose holder died."""
        by_stage = {h.stage: h for h in handles}
        while True:
            await asyncio.sleep(REAP_S)
            for entry in await self.store.registry_reap():
                if entry.holder == self.holder:
                    continue                      # ours: we are alive, the entry was late
                for s in entry.stages:
                    h = by_stage.get(s)
                    if h is not None and await h.release([entry.request_id], remote=False):
                        log.warning("released pins of %s on stage %d: holder %s died",
                                    entry.request_id, s, entry.holder)
                on_release()


class KnobWatcher:
    """Hands each new knob version in the store to ``apply``."""

    def __init__(self, store: Store, apply: Callable[[Knobs, int], None]) -> None:
        self.store = store
        self.apply = apply
        self.version = -1

    async def publish(self, knobs: Knobs) -> None:
        """Make the store's record equal to the knobs the runtime starts with."""
        record = await self.store.knobs_get()
        changes = {k: v for k, v in knobs.as_dict().items() if record.values.get(k) != v}
        if changes or record.version == 0:
            record = await self.store.knobs_set(changes)
        self.version = record.version

    async def run(self) -> None:
        while True:
            await asyncio.sleep(KNOB_POLL_S)
            record = await self.store.knobs_get()
            if record.version == self.version:
                continue
            self.version = record.version
            try:
                self.apply(from_dict(record.values), record.version)
            except KnobError as exc:              # validated on write; a foreign writer may differ
                log.error("ignoring knobs version %d: %s", record.version, exc)
