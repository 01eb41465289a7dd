"""The runtime's side of the shared store, kept off the critical path.

* :class:`StoreWriter` - an ordered queue of store writes (wave plans, registry entries) run by one
  background task; the dispatcher and the stages never wait for a store round trip.
* :class:`LeaseRegistry` - records, per admitted request, which stages hold its lease and escrow,
  under this leader's id; a heartbeat keeps the entries alive. A reaper releases the local pins of
  requests whose holder died (its heartbeat expired), so a dead leader's pins never leak.
* :class:`KnobWatcher` - publishes the deployment, polls the store's knob record and hands a new
  version the deployment can use to the loop, which applies it at the next wave boundary; it refuses
  the others and writes the runtime's knobs back when the store lost them.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from wavepp.runtime.clock import sleep
from wavepp.runtime.control.knobs import Deployment, KnobError, Knobs, from_dict, validated_values
from wavepp.runtime.kvcache.handle import StageHandle
from wavepp.runtime.request import AdmittedRequest, cdiv
from wavepp.store.base import RegistryEntry, Store
from wavepp.store.resilient import StoreGone

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
            except StoreGone:            # the store is not coming back: the run ends
                raise
            except Exception as exc:     # a write that cannot succeed must not stop the others
                self.failures += 1
                if self.failures == 1:   # one line, once: every later write would say the same
                    log.warning("store write failed (later failures not reported): %s", exc)
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
                                 cdiv(a.request.num_tokens - a.reused_tokens, block_size)) for a in requests]
        if entries:
            self.writer.submit(lambda: self.store.registry_put(entries, LEASE_TTL_S))

    def released(self, request_id: str) -> None:
        self.writer.submit(lambda: self.store.registry_drop(self.holder, [request_id]))

    async def heartbeat(self) -> None:
        while True:
            await self.store.registry_refresh(self.holder, LEASE_TTL_S)
            await sleep(HEARTBEAT_S)

    async def reaper(self, handles: Sequence[StageHandle], on_release: Callable[[], None]) -> None:
        """Release pins on local stages for requests whose holder died."""
        by_stage = {h.stage: h for h in handles}
        while True:
            await sleep(REAP_S)
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
    """Hands each new knob version in the store to ``apply`` if the running deployment can use it.

    A record that does not fit (written by a client that skipped validation, or checked against
    another deployment) is refused: the runtime keeps its knobs, logs one line, calls ``refuse``
    (the loop marks its next wave plan) and keeps the refusal for its status snapshots, where the
    dashboard shows it as a banner. A record that is gone (the store restarted empty, or was
    cleared) or corrupt is written back from the knobs the runtime runs with, so they survive the
    store. Nothing here stops a run: a corrupt entry is reported once and read as absent.

    The deployment record is this runtime's: one that differs from ``deployment`` (another client
    wrote it, or it is gone or corrupt) is rewritten at the next poll, reported once; nothing the
    runtime validates is ever checked against the stored one.
    """

    def __init__(self, store: Store, deployment: Deployment, apply: Callable[[Knobs, int], None],
                 refuse: Callable[[int, str], None], knobs: Knobs | None = None) -> None:
        self.store = store
        self.deployment = deployment
        self.apply = apply
        self.refuse = refuse
        self.version = -1                     # the version the runtime runs with (from its next wave)
        self.knobs = knobs or Knobs()         # ... and its values (the runtime's starting knobs, until published)
        self.refused: dict[str, Any] | None = None   # the last refusal: {"version", "reason", "running"}
        self._seen = -1                       # the last version read (accepted or refused)
        self._notes: set[str] = set()
        self._deployment_reported = False
        # A poll and the store's reconnect hook (Publications.republish) both read the record and
        # write it when it is gone: one at a time, or both read it empty and it is written twice
        # (a version the runtime never ran).
        self._record_lock = asyncio.Lock()

    async def publish(self, knobs: Knobs) -> None:
        """Publish the deployment and make the store's record equal to ``knobs`` (the runtime's)."""
        async with self._record_lock:
            await self._publish(knobs)

    async def _publish(self, knobs: Knobs) -> None:
        await self.store.deployment_put(self.deployment)
        record = await self.store.knobs_get()
        self._report(record.note)
        stored = record.values_or(Knobs().as_dict())
        changes = {k: v for k, v in knobs.as_dict().items() if stored.get(k) != v}
        self.knobs = knobs
        try:
            if changes or record.version == 0:
                record = await self.store.knobs_set(changes, deployment=self.deployment, validate=validated_values,
                                                    min_version=self._write_back_version())
        except KnobError as exc:              # the stored record is another client's, and invalid
            self._seen = record.version
            self._refuse(record.version, str(exc))
            return
        self.version = self._seen = record.version

    def _write_back_version(self) -> int:
        """The least version a record this runtime writes may take: the one it runs with (the values
        are that version's), or past the last one it refused (whose number meant other values). A store
        that lost the record then never shows a client a version below one it saw through this runtime
        (a write the runtime had not read yet before the store restarted is lost with its number)."""
        if self._seen < 1:
            return 1
        return self._seen if self._seen == self.version else self._seen + 1

    async def run(self) -> None:
        while True:
            await sleep(KNOB_POLL_S)
            await self.poll()

    async def poll(self) -> None:
        """Read the record once: write it back if it is gone, put the deployment record back if it is
        not this runtime's, apply or refuse a new version."""
        async with self._record_lock:
            await self._poll()

    async def _poll(self) -> None:
        record = await self.store.knobs_get()
        self._report(record.note)
        if record.version == 0:
            log.warning("no knobs record in the store (restarted empty, cleared or corrupt): writing back "
                        "the knobs of version %d", self.version)
            await self._publish(self.knobs)
            return
        if record.deployment != self.deployment:
            await self._restore_deployment(record.deployment)
        if record.version == self._seen:
            return
        self._seen = record.version
        try:
            knobs = from_dict(record.values, self.deployment)
            self.apply(knobs, record.version)   # KnobError too when the run cannot take them (e.g. its cache pool)
        except KnobError as exc:              # validated on write; a foreign writer may differ
            self._refuse(record.version, str(exc))
            return
        self.version, self.knobs, self.refused = record.version, knobs, None

    async def _restore_deployment(self, found: Deployment | None) -> None:
        if not self._deployment_reported:     # a client rewriting it in a loop must not flood the log
            self._deployment_reported = True
            log.warning("the deployment record in the store is %s, not this runtime's %s (another client wrote "
                        "it?): rewriting it (later rewrites are not reported)",
                        found.as_dict() if found else "absent or corrupt", self.deployment.as_dict())
        await self.store.deployment_put(self.deployment)

    def _refuse(self, version: int, reason: str) -> None:
        log.error("refusing knobs version %d: %s (keeping version %d)", version, reason, self.version)
        self.refused = {"version": version, "reason": reason, "running": self.version}
        self.refuse(version, reason)

    def _report(self, note: str | None) -> None:
        if note is not None and note not in self._notes:
            self._notes.add(note)
            log.error("knobs in the store: %s", note)
