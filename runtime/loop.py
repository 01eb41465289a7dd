"""The pipeline loop: plan a wave -> dispatch it through the stages -> retire completions.

The stage side is in :mod:`runtime.stage_tasks`, the end of a request's path in
:mod:`runtime.completion`; this module owns the state and the tasks that tie them together.

The same code runs on every engine; an engine supplies stage handles, a stage executor, a
store and an event loop (virtual time on the sim). Tasks::

    arrivals ─► waiting ─► [admission task] ─► active ─► dispatcher ─► stage 0 ─► link ─► stage 1 … ─► retire
                   ▲                                         ▲                                          │
                   └──────────── closed loop: a finished request brings the next ◄──────────────────────┘

The policy's mechanisms plug into fixed hook points (:mod:`runtime.mechanisms`): its admission
drive runs rounds in the admission task or in the dispatcher before each plan; its chunking and
token charge make the planner; its ring bounds the waves in flight; its stage admission runs
before a stage prepares a chunk. Each stage prepares a chunk locally (materialize) right before
it executes the wave; a chunk whose request failed or fell back meanwhile is skipped ("stale":
its attempt is no longer live).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from runtime.admission import Admission
from runtime.completion import finish_failed
from runtime.control_plane import KnobWatcher, LeaseRegistry, StoreWriter
from runtime.engines.base import LeaseItem, MaterializeItem, StageExecutor, StageHandle, now
from runtime.index_publisher import IndexPublisher
from runtime.knobs import Deployment, Knobs, check_block_size
from runtime.policies import get_policy
from runtime.policies.base import Policy
from runtime.request import AdmittedRequest, Chunk, Completion, Request, Wave
from runtime.stage_tasks import execute_waves, prepare_waves, run_link
from runtime.traces import TraceWorkload
from runtime.wakeup import Wakeup
from runtime.watchdog import DEFAULT_STALL_TIMEOUT_S, watch
from runtime.workloads import Workload
from store.base import Store
from store.resilient import ResilientStore
from telemetry import names as N
from telemetry.setup import Telemetry

log = logging.getLogger(__name__)

STATUS_EVERY_S = 0.25          # runtime status snapshots (dashboard: queues, cache state over time)
STATUS_HISTORY = 20_000
COMPLETIONS_KEPT = 100_000     # a long-running (live) loop keeps the most recent ones
EVER_COMPUTED_CAP = 4_000_000  # block hashes remembered for the good-hit rate (oldest forgotten first)


@dataclass(slots=True)
class LoopResult:
    completions: deque[Completion] = field(default_factory=lambda: deque(maxlen=COMPLETIONS_KEPT))
    failures: dict[str, str] = field(default_factory=dict)     # request id -> one-line error
    knob_changes: list[tuple[int, dict[str, Any]]] = field(default_factory=list)   # (span-clock ns, changes)
    status: deque[dict[str, Any]] = field(default_factory=lambda: deque(maxlen=STATUS_HISTORY))


class PipelineLoop:
    """One run of a workload through P stages under one policy."""

    def __init__(self, handles: Sequence[StageHandle], executor: StageExecutor, store: Store,
                 knobs: Knobs, workload: Workload | TraceWorkload, concurrency: int,
                 telemetry: Telemetry, block_size: int, publish_plans: bool = True,
                 stall_timeout_s: float = DEFAULT_STALL_TIMEOUT_S) -> None:
        """``stall_timeout_s``: end the run with :class:`runtime.watchdog.Stalled` when nothing
        happens that long while work waits (the deadlock guard)."""
        if concurrency < 1:
            raise ValueError(f"concurrency must be >= 1, got {concurrency}")
        if not stall_timeout_s > 0:
            raise ValueError(f"stall timeout must be > 0 s, got {stall_timeout_s}")
        check_block_size(knobs, block_size)
        self.handles = list(handles)
        self.num_stages = len(self.handles)
        self.executor = executor
        self.store = store
        self.workload = workload
        self.concurrency = concurrency
        self.tel = telemetry
        self.block_size = block_size
        self.publish_plans = publish_plans
        self.stall_timeout_s = stall_timeout_s
        self.knobs = knobs
        self._configure(knobs)
        self.publisher = IndexPublisher(self.handles, store)
        self.writer = StoreWriter()
        self.registry = LeaseRegistry(store, self.writer)
        self.knob_watcher = KnobWatcher(store, Deployment(block_size, self.num_stages),
                                        lambda knobs, version: self.set_knobs(knobs), self._knobs_refused)
        self.min_capacity = min(h.capacity for h in self.handles)
        self._pending_knobs: Knobs | None = None
        self._plan_events: list[tuple[str, dict[str, Any]]] = []  # knob changes and refusals: on the next wave plan
        self.progress: Callable[[int, int], None] | None = None   # (finished, total) after each request

        self.waiting: deque[Request] = deque()
        self.active: dict[str, AdmittedRequest] = {}
        self.spans: dict[str, Any] = {}
        self.ever_computed: dict[int, None] = {}       # an insertion-ordered set, capped
        self.result = LoopResult()
        self.waves_in_flight: dict[int, Wave] = {}      # planned, not yet retired
        self.executing = 0                            # stages inside a step right now
        self.num_admitted = 0
        self.admitting = 0                            # requests inside an admission round right now
        self.next_wave_id = 0
        self.num_finished = 0
        self.passed = [0] * self.num_stages          # waves that finished stage s
        self.retired = 0
        self.changed = Wakeup()                       # arrivals, admissions, retirements
        self.capacity = Wakeup()                      # blocks freed on some stage
        self.index_dirty = Wakeup()
        # Per stage: the waves planned (the schedule reaches every stage when the wave is planned, as
        # a plan in the store or a relayed schedule), and the waves whose activations arrived from the
        # previous stage; ``links[s]``: waves stage s finished, for the link to s + 1.
        self.inbox: list[asyncio.Queue[Wave | None]] = [asyncio.Queue() for _ in range(self.num_stages)]
        self.arrived: list[asyncio.Queue[Wave]] = [asyncio.Queue() for _ in range(self.num_stages)]
        self.links: list[asyncio.Queue[Wave | None]] = [asyncio.Queue() for _ in range(self.num_stages)]
        # Per stage: the wave prepared (materialized) while the previous one executes, with its block
        # tables; one at most (a stage prepares only once the previous one was taken: Queue.join).
        self.prepared: list[asyncio.Queue[tuple[Wave, dict[str, list[int]]]]] = [
            asyncio.Queue() for _ in range(self.num_stages)]
        self.done = asyncio.Event()

    def _configure(self, knobs: Knobs) -> None:
        """Policy, admission, planner and ring from the knobs (at start and at a wave boundary)."""
        self.policy: Policy = get_policy(knobs.policy)
        self.admit_stages = self.policy.stage_admission.admit_stages(self.num_stages)
        self.admission = Admission(self.handles, self.admit_stages, self.store, self.block_size, self.tel,
                                   self.policy.lookup, self.policy.reserve)
        self.planner = self.policy.make_planner(knobs, self.num_stages, self.block_size)
        self.ring = self.policy.ring_size(knobs, self.num_stages)

    # ---- public -------------------------------------------------------------------------------
    def set_knobs(self, knobs: Knobs) -> None:
        """Apply new knobs at the next wave boundary (KnobError now if this deployment cannot use them)."""
        self._pending_knobs = check_block_size(knobs, self.block_size)

    def _knobs_refused(self, version: int, reason: str) -> None:
        self._plan_events.append((N.EVENT_KNOBS_REFUSED, {N.KNOBS_VERSION: version, N.ERROR: reason}))

    async def prime(self) -> None:
        """Compute the workload's already-seen prefixes into every stage's cache (not measured).

        Each prefix runs through the stages as one chunk, so a real engine holds real K/V for
        it; stages with less room keep fewer (their LRU evicts) - residency starts to diverge.
        """
        for i, (tokens, hashes) in enumerate(self.workload.primed_prompts()):
            req = Request(f"prime{i}", tokens, now(), hashes)
            chunk = Chunk(req.id, 0, req.num_tokens, 0, True)
            wave = Wave(-1 - i, [chunk], req.num_tokens, now())
            need = -(-req.num_tokens // self.block_size)
            self.executor.register(req)
            tables: list[list[int]] = []
            for h in self.handles:
                await h.lease([LeaseItem(req.id, hashes, 0, req.num_tokens)], remote=False)
                if not await h.escrow([(req.id, need)], remote=False):
                    break
                [table] = (await h.materialize_many([MaterializeItem(req.id, 0, req.num_tokens, 0)])).tables
                assert not isinstance(table, Exception), table
                tables.append(table)
            if len(tables) == self.num_stages:
                for s, table in enumerate(tables):
                    await self.executor.execute(s, wave.id, [chunk], {req.id: table})
                    if s < self.num_stages - 1:
                        await self.executor.transfer(s, wave)
                for h in self.handles:
                    await h.complete_many([(req.id, hashes)])
                self.remember_computed(hashes)
            else:                                   # did not fit on some stage: skip it
                for h in self.handles:
                    await h.release([req.id], remote=False)
            self.executor.forget(req.id)
        await self.publisher.flush()

    async def run(self) -> LoopResult:
        """Run the workload to the end; the last status record says how the run ended."""
        try:
            result = await self._run()
        except BaseException as exc:
            await self._final_status(f"failed: {(str(exc) or type(exc).__name__).splitlines()[0][:300]}")
            raise
        await self._final_status("finished")
        return result

    async def _final_status(self, state: str) -> None:
        """Best effort: a store that is down, or stages that died, must not hide the run's own error."""
        try:
            snapshot = await asyncio.wait_for(self.status(state), STATUS_EVERY_S * 4)
            self.result.status.append(snapshot)
            await asyncio.wait_for(self.store.status_put(snapshot), STATUS_EVERY_S * 4)
        except Exception as exc:                 # noqa: BLE001 - reported, never raised over the run's outcome
            # After a failure the cause is mostly the same (the store gone, a stage dead) and the run's
            # own error line says it: not a second line on the terminal then.
            report = log.warning if state == "finished" else log.debug
            report("could not record the run's final status (%s): %s", state, exc)

    async def _run(self) -> LoopResult:
        await self.prime()
        await self.knob_watcher.publish(self.knobs)
        if isinstance(self.store, ResilientStore):
            self.store.on_reconnect.append(self.publisher.rebuild)
        named = {"dispatcher": self._dispatcher(), "admission": self._admission_task(),
                 "publisher": self._publisher(), "store-writer": self.writer.run(),
                 "heartbeat": self.registry.heartbeat(), "knobs": self.knob_watcher.run(),
                 "reaper": self.registry.reaper(self.handles, self.capacity.notify),
                 "status": self._status_task(),
                 "watchdog": watch(self, self.stall_timeout_s)}
        named |= {f"prepare{s}": prepare_waves(self, s) for s in range(self.num_stages)}
        named |= {f"stage{s}": execute_waves(self, s) for s in range(self.num_stages)}
        named |= {f"link{s}": run_link(self, s) for s in range(self.num_stages - 1)}
        tasks = [asyncio.create_task(coro, name=name) for name, coro in named.items()]
        if isinstance(self.workload, TraceWorkload):
            tasks.append(asyncio.create_task(self._open_loop_arrivals(self.workload), name="arrivals"))
        else:
            for _ in range(min(self.concurrency, self.workload.num_requests)):
                self._arrive()
        done_wait: asyncio.Task[Any] = asyncio.create_task(self.done.wait())
        finished, _ = await asyncio.wait([done_wait, *tasks], return_when=asyncio.FIRST_COMPLETED)
        for t in tasks:
            t.cancel()
        _, stuck = await asyncio.wait(tasks, timeout=10)
        for t in tasks:     # one that failed while stopping (its stage died too) is said by the first failure
            if t.done() and not t.cancelled():
                t.exception()
        if stuck:
            raise RuntimeError(f"tasks did not stop: {', '.join(sorted(t.get_name() for t in stuck))}")
        for t in finished:
            if t is not done_wait and t.exception() is not None:
                raise t.exception()  # type: ignore[misc]
        await self.publisher.flush()
        await self._drain_writes()
        return self.result

    async def _drain_writes(self) -> None:
        task = asyncio.create_task(self.writer.run())
        try:
            await self.writer.drain()
        finally:
            task.cancel()

    def remember_computed(self, hashes: Sequence[int]) -> None:
        self.ever_computed.update(dict.fromkeys(hashes))
        if len(self.ever_computed) > EVER_COMPUTED_CAP:
            for h in list(itertools.islice(self.ever_computed, len(self.ever_computed) - EVER_COMPUTED_CAP)):
                del self.ever_computed[h]

    @property
    def in_flight(self) -> int:
        return len(self.waves_in_flight)

    def progress_mark(self) -> tuple[int, int, int, int]:
        """Changes whenever the run moves: admissions, waves planned, waves through a stage,
        requests finished or failed (the deadlock guard compares two of these)."""
        return self.num_admitted, self.next_wave_id, sum(self.passed), self.num_finished

    # ---- arrival ------------------------------------------------------------------------------
    def _arrive(self, req: Request | None = None) -> None:
        req = req or self.workload.next_request(now())
        reusable = 0
        for h in req.block_hashes[: (req.num_tokens - 1) // self.block_size]:
            if h not in self.ever_computed:
                break
            reusable += 1
        self.spans[req.id] = self.tel.start(N.REQUEST, {
            N.REQUEST_ID: req.id, N.POLICY: self.policy.name, N.GEN_AI_INPUT_TOKENS: req.num_tokens,
            N.REUSABLE_TOKENS: reusable * self.block_size}, root=True)
        self.executor.register(req)
        if req.num_tokens > self.executor.max_context:
            finish_failed(self, req, f"prompt of {req.num_tokens} tokens is longer than the model's context "
                                     f"({self.executor.max_context})")
            return
        if -(-req.num_tokens // self.block_size) > self.min_capacity:
            finish_failed(self, req, f"prompt of {req.num_tokens} tokens needs more KV blocks than a stage "
                                     f"has ({self.min_capacity} x {self.block_size} tokens)")
            return
        self.waiting.append(req)
        self.changed.notify()

    def next_arrival(self) -> None:
        self.num_finished += 1
        if self.progress is not None:
            self.progress(self.num_finished, self.workload.num_requests)
        if self.num_finished >= self.workload.num_requests:
            self.done.set()
        elif not self.workload.open_loop and not self.workload.exhausted:
            # Drawn now, handled on the next turn: not recursive when many fail at once.
            asyncio.get_running_loop().call_soon(self._arrive, self.workload.next_request(now()))
        else:
            self.changed.notify()           # open loop: a slot under the concurrency cap is free

    async def _open_loop_arrivals(self, workload: TraceWorkload) -> None:
        """Requests arrive at the trace's offsets, with at most ``concurrency`` outstanding (a
        client's max concurrency): one that would exceed it arrives when a request finishes."""
        start = now()
        while not workload.exhausted:
            delay = start + workload.arrival_offset(workload.issued) - now()
            if delay > 0:
                await asyncio.sleep(delay)
            while workload.issued - self.num_finished >= self.concurrency:
                await self.changed.wait()
            self._arrive(workload.next_request(now()))
        await self.done.wait()              # a task of the run: returning would end it

    # ---- admission ----------------------------------------------------------------------------
    def _take_batch(self) -> list[Request]:
        room = min(self.knobs.max_round_requests, self.knobs.max_leases - len(self.active))
        return [self.waiting.popleft() for _ in range(min(room, len(self.waiting)))]

    async def admit_once(self) -> bool:
        """One round over the head of the waiting queue; False when nothing could be admitted."""
        batch = self._take_batch()
        if not batch:
            return False
        self.admitting = len(batch)
        try:
            result = await self.admission.round(batch)
        finally:
            self.admitting = 0
        self.num_admitted += len(result.admitted)
        for a in result.admitted:
            self.active[a.id] = a
            self.tel.event(self.spans[a.id], N.EVENT_ADMITTED, {N.REUSE_BLOCKS: a.reuse_blocks})
        self.registry.admitted(result.admitted, self.num_stages, self.block_size)
        self.waiting.extendleft(reversed(result.deferred))
        if result.admitted:
            self.changed.notify()
        return bool(result.admitted)

    async def _admission_task(self) -> None:
        while True:
            await self.policy.admission.background(self)

    # ---- planning and dispatch --------------------------------------------------------------
    def _apply_pending_knobs(self) -> None:
        knobs, self._pending_knobs = self._pending_knobs, None
        if knobs is None or knobs == self.knobs:
            return
        old = self.knobs.as_dict()
        changed = {k: v for k, v in knobs.as_dict().items() if old[k] != v}
        self.knobs = knobs
        self._configure(knobs)
        self.result.knob_changes.append((self.tel.now_ns(), changed))
        self._plan_events.append((N.EVENT_KNOBS, {N.KNOBS_CHANGED: sorted(changed),
                                                  **{f"wavepp.knobs.{k}": v for k, v in changed.items()}}))
        self.changed.notify()

    async def _dispatcher(self) -> None:
        while True:
            self._apply_pending_knobs()
            if self.in_flight >= self.ring:
                await self.changed.wait()
                continue
            admitted_tokens = await self.policy.admission.before_plan(self)
            if self._should_fill():
                await self.changed.wait()
                continue
            wave = self._plan()
            if wave is None:
                await self.changed.wait()
                continue
            if self.policy.relay.on:
                wave.broadcast_tokens = admitted_tokens
            if self.publish_plans:
                plan = {"wave": wave.id, "budget": wave.budget, "planned_at": wave.planned_at,
                        "policy": self.policy.name, "chunks": [
                            {"request": c.request_id, "start": c.start, "tokens": c.length,
                             "reuse_blocks": c.reuse_blocks, "last": c.is_last} for c in wave.chunks]}
                self.writer.submit(lambda plan=plan: self.store.plan_publish(plan))  # type: ignore[misc]
            self.waves_in_flight[wave.id] = wave
            for inbox in self.inbox:
                inbox.put_nowait(wave)

    def _should_fill(self) -> bool:
        """Wait for a fuller wave while P waves keep every stage busy and more work is on its way
        (arrived or being admitted): a wave costs a fixed overhead per stage, so many small waves
        would waste it. The dispatcher wakes again on every admission and retirement, and sends
        what it has once fewer than P are in flight."""
        if not self.policy.fill.on or self.in_flight < self.num_stages:
            return False
        if not self.waiting and not self.admitting:
            return False                    # no more work is on its way: waiting would only idle stage 0
        unscheduled = sum(a.remaining for a in self.active.values())
        return 0 < unscheduled < self.knobs.min_wave_tokens

    def _plan(self) -> Wave | None:
        active = list(self.active.values())
        with self.tel.span(N.WAVE_PLAN) as span:
            plan = self.planner.plan(active)
            if plan is None:
                span.set_attribute(N.TOKENS, 0)
                return None
            for name, attributes in self._plan_events:   # e.g. marks the first wave under new knobs
                self.tel.event(span, name, attributes)
            self._plan_events.clear()
            wave = Wave(self.next_wave_id, plan.chunks, plan.budget, now())
            self.next_wave_id += 1
            for c in plan.chunks:
                self.active[c.request_id].scheduled += c.length
                span.add_link(self.spans[c.request_id].get_span_context())   # the wave carries these requests
            span.set_attributes({
                N.WAVE_ID: wave.id, N.BUDGET: plan.budget, N.TOKENS: wave.num_tokens,
                N.NUM_WAVES_READY: plan.ready_waves, N.NUM_IN_FLIGHT: self.in_flight + 1, N.RING: self.ring,
                N.REQUEST_IDS: [c.request_id for c in plan.chunks]})
        return wave

    async def status(self, state: str = "running") -> dict[str, Any]:
        """A snapshot of queues and per-stage cache state (the dashboard's Cache and Admission pages),
        with the run's id (runs sharing a store never mix), the wall-clock time it was taken (a viewer
        tells a silent runtime from a busy one) and the runtime's state: running, finished or failed."""
        stages = []
        for h, st in zip(self.handles, await asyncio.gather(*(h.stats() for h in self.handles)), strict=True):
            stages.append({"stage": h.stage, "capacity": st.num_blocks, "cached": st.num_cached,
                           "free": st.num_free, "leases": st.num_leases, "escrowed": st.num_escrowed_blocks,
                           "evictions": st.num_evictions, "replacements": st.num_victim_replacements})
        return {"t": self.tel.now_ns(), "run": self.tel.run_id, "wall": time.time(), "state": state,
                "policy": self.policy.name, "waiting": len(self.waiting),
                "active": len(self.active), "in_flight": self.in_flight, "ring": self.ring,
                "finished": self.num_finished, "failed": len(self.result.failures),
                "knobs_version": self.knob_watcher.version, "knobs_refused": self.knob_watcher.refused,
                "stages": stages}

    async def _status_task(self) -> None:
        while True:
            snapshot = await self.status()
            self.result.status.append(snapshot)
            self.writer.submit(lambda snapshot=snapshot: self.store.status_put(snapshot))  # type: ignore[misc]
            await asyncio.sleep(STATUS_EVERY_S)

    async def _publisher(self) -> None:
        """Stages publish attach/detach events to the hint index off the critical path."""
        while True:
            await self.index_dirty.wait()
            await self.publisher.flush()
