"""The pipeline loop: plan a wave -> dispatch it through the stages -> retire completions.

A request's path, module by module::

    arrival (here) ─► waiting ─► admission rounds (runtime.admission) ─► admitted
      ─► wave plan (here, runtime.planning.planner) ─► stages (runtime.stage_tasks) ─► retire (runtime.completion)

The run's requests and waves live in one :class:`runtime.run_state.RunState`; the stage tasks,
completion and the policy's mechanisms see that state and their own ports, never this object.
This module owns the configuration (knobs, policy, planner, ring), arrivals, the dispatcher and the tasks
that tie the parts together. The same code runs on every engine; an engine supplies stage handles, a stage
executor, a store and an event loop (virtual time on the sim). Tasks::

    arrivals ─► waiting ─► [admission task] ─► active ─► dispatcher ─► stage 0 ─► link ─► stage 1 … ─► retire
                   ▲                                         ▲                                          │
                   └──────────── closed loop: a finished request brings the next ◄──────────────────────┘

The policy's mechanisms plug into fixed hook points (:mod:`runtime.mechanisms`): its admission drive runs rounds
in the admission task or in the dispatcher before each plan; its chunking and token charge make the planner; its
ring bounds the waves in flight; its stage admission runs before a stage prepares a chunk; its host work runs on
each stage for each wave; its return path decides when a ring slot reopens. Each stage prepares a chunk locally
(materialize) right before it executes the wave; a chunk whose request failed or fell back meanwhile is skipped
("stale": its attempt is no longer live).
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from wavepp.runtime.admission import AdmissionQueue
from wavepp.runtime.arrival_limits import refusal
from wavepp.runtime.arrivals import ArrivalPort, ArrivalSource
from wavepp.runtime.clock import now
from wavepp.runtime.completion import LoopResult, RequestEnds
from wavepp.runtime.control.index_publisher import IndexPublisher
from wavepp.runtime.control.knobs import Deployment, Knobs, check_block_size
from wavepp.runtime.control.plane import KnobWatcher, LeaseRegistry, StoreWriter
from wavepp.runtime.control.publications import Publication, Publications
from wavepp.runtime.control.status import RunStatus
from wavepp.runtime.engines.base import EngineParts
from wavepp.runtime.figures.prefix_ledger import PrefixLedger
from wavepp.runtime.guards import invariants
from wavepp.runtime.guards.watchdog import DEFAULT_STALL_TIMEOUT_S, watch
from wavepp.runtime.in_force import InForce
from wavepp.runtime.planning.step_times import StepTimes
from wavepp.runtime.policies.base import Policy
from wavepp.runtime.request import Completion, Request, Wave
from wavepp.runtime.run_state import RunState
from wavepp.runtime.stage_tasks import StageWorker, run_link
from wavepp.store.base import Store
from wavepp.store.records import PlannedChunk, StatusSnapshot, WavePlanRecord
from wavepp.store.resilient import ResilientStore
from wavepp.telemetry import names as N
from wavepp.telemetry.setup import Telemetry

log = logging.getLogger(__name__)

__all__ = ["LoopConfig", "LoopResult", "PipelineLoop"]


@dataclass(frozen=True, slots=True)
class LoopConfig:
    """How one run goes beside its engine, its knobs and its source. ``concurrency``: requests outstanding at
    once (a closed loop's, or an open loop's cap; 0: an open loop without one). ``publish_plans``: each wave's
    plan to the store (the dashboard's Waves page). ``stall_timeout_s``: end the run with
    :class:`runtime.guards.watchdog.Stalled` when nothing happens that long while work waits (the deadlock
    guard). ``meta``: what the run is (:func:`runtime.runs.meta.describe_run`), published under the run's id for
    viewers of the store. ``check_invariants``: check :mod:`runtime.guards.invariants` after every retired wave
    and once the run drained (slow: every stage's whole pool each time; for tests and diagnosis)."""

    concurrency: int = 1
    publish_plans: bool = True
    stall_timeout_s: float = DEFAULT_STALL_TIMEOUT_S
    meta: dict[str, Any] | None = None
    check_invariants: bool = False

    def __post_init__(self) -> None:
        if self.concurrency < 0:
            raise ValueError(f"concurrency must be >= 0 (0: an open loop without a cap), got {self.concurrency}")
        if not self.stall_timeout_s > 0:
            raise ValueError(f"stall timeout must be > 0 s, got {self.stall_timeout_s}")


class PipelineLoop:
    """One run of a workload through P stages under one policy."""

    def __init__(self, parts: EngineParts, store: Store, knobs: Knobs, workload: ArrivalSource,
                 telemetry: Telemetry, config: LoopConfig = LoopConfig()) -> None:
        """``parts``: the engine's stages, executor and block size for this run; ``store``: the run's store
        (the engine's, or one opened for the run)."""
        if config.concurrency < (0 if workload.open_loop else 1):     # 0: an open loop without a cap
            raise ValueError(f"concurrency must be >= 1, got {config.concurrency}")
        block_size = parts.block_size
        check_block_size(knobs, block_size)
        self.config = config
        self.handles = list(parts.handles)
        self.num_stages = len(self.handles)
        self.executor = executor = parts.executor
        self.store = store
        self.workload = workload
        self.concurrency = config.concurrency
        self.tel = telemetry
        self.block_size = block_size
        self.run_state = RunState(self.num_stages)
        self.step_times = StepTimes(self.num_stages, executor.step_prior, executor.step_model())  # planners price waves
        self.spans: dict[str, Any] = {}               # request id -> its open span
        self.result = LoopResult()
        self.publisher = IndexPublisher(self.handles, store)
        self.writer = StoreWriter()
        self.registry = LeaseRegistry(store, self.writer)
        self.in_force = InForce(self.handles, store, block_size, telemetry, self.step_times, self.run_state, knobs)
        self.queue = AdmissionQueue(self.run_state, self.in_force.admission, knobs, self.registry, telemetry,
                                    self.spans, self.in_force.room)
        # What earlier requests hold of a prompt (reuse figures), remembered for a few pools' worth of blocks:
        self.prefixes = PrefixLedger(block_size, max(h.capacity for h in self.handles))
        self.ends = RequestEnds(self.run_state, self.handles, executor, telemetry, self.spans, self.registry,
                                self.result, self.in_force.current_policy, self.next_arrival,
                                self.prefixes.completed, self._plan_retired)
        if config.check_invariants:
            self.ends.after_retire = functools.partial(invariants.check_running, self)
        self.stages = [StageWorker(s, h, executor, telemetry, self.run_state, self.ends, self.in_force.current_policy,
                                   block_size, self.step_times) for s, h in enumerate(self.handles)]
        self.knob_watcher = KnobWatcher(store, Deployment(block_size, self.num_stages), self._knobs_written,
                                        self.in_force.refused, knobs)
        self.reports = RunStatus(self.handles, self.run_state, self.in_force, self.knob_watcher, self.result,
                                 telemetry, store, self.writer)
        self.publications = Publications(self._publications(config.meta))
        self.published = asyncio.Event()              # what the run publishes at start is in the store
        self.min_capacity = min(h.capacity for h in self.handles)
        self.progress: Callable[[int, int], None] | None = None   # (finished, total) after each request
        self.done = asyncio.Event()
        self.warming = False                   # inside warm_up: spans muted, knob changes held back
        self.port = ArrivalPort(self._arrive, self.run_state, self.ends, self.result.failures, config.concurrency,
                                self.done)

    # What the knobs in force made (runtime.in_force), as the loop's own.
    @property
    def knobs(self) -> Knobs:
        return self.in_force.knobs

    @property
    def policy(self) -> Policy:
        return self.in_force.policy

    def _configure(self, knobs: Knobs) -> None:
        self.in_force.configure(knobs)
        self._queue_follows()

    def _queue_follows(self) -> None:
        """The admission queue runs the admission the knobs in force made."""
        self.queue.configure(self.in_force.admission, self.in_force.knobs, self.in_force.room)

    # ---- public -------------------------------------------------------------------------------
    def set_knobs(self, knobs: Knobs) -> None:
        """Apply new knobs at the next wave boundary (KnobError now if this deployment cannot use them)."""
        self.in_force.set(knobs)

    def _publications(self, meta: dict[str, Any] | None) -> list[Publication]:
        """Everything the run publishes at start - and again when the store came back empty."""
        items = []
        if meta is not None:
            run_id = self.tel.run_id
            items.append(Publication("the run's description", lambda: self.store.run_meta_put(run_id, meta)))

        async def label() -> None:
            self.tel.publish_run()
        items.append(Publication("the run's label", label))
        # The knobs the runtime runs with by then (the starting ones at start), and the deployment.
        items.append(Publication("the deployment and the knobs",
                                 lambda: self.knob_watcher.publish(self.knob_watcher.knobs)))
        return items

    def _knobs_written(self, knobs: Knobs, version: int) -> None:    # a knob watcher's report: apply them
        self.set_knobs(knobs)

    async def warm_up(self) -> None:
        """Compute the workload's already-seen prefixes into every stage's cache before the measured
        arrivals, one at a time on the ordinary path (a real engine holds real K/V for them); stages
        with less room keep fewer (their LRU evicts): residency starts to diverge. Not measured: no
        span is recorded, it counts in no figure (a prompt no stage could hold is skipped)."""
        primed = self.workload.primed_prompts()
        self.warming = True
        with self.tel.muted():
            for i, (tokens, hashes) in enumerate(primed):
                req = Request(f"prime{i}", tokens, now(), hashes, "prime")
                self._arrive(req, warming=(ended := asyncio.get_running_loop().create_future()))
                await ended                          # (a prompt no stage can hold has ended at once)
            # Index entries published before the measured arrivals (the woken tasks run, unrecorded).
            await self.publisher.flush()
        self.warming = False
        if primed:                           # the measured run plans from scratch (MPU's hysteresis)
            self._configure(self.knobs)
        self.run_state.changed.notify()      # knobs that came in meanwhile apply now

    async def run(self) -> LoopResult:
        """Run the workload to the end; the last status record says how the run ended."""
        try:
            result = await self._run()
        except BaseException as exc:
            await self.reports.final(f"failed: {(str(exc) or type(exc).__name__).splitlines()[0][:300]}")
            raise
        await self.reports.final("finished")
        return result

    async def _run(self) -> LoopResult:
        await self.publications.publish()
        if isinstance(self.store, ResilientStore):
            self.store.on_reconnect += [self.publications.republish, self.publisher.rebuild]
        self.published.set()
        named = {"arrivals": self._arrivals(), "dispatcher": self._dispatcher(), "admission": self._admission_task(),
                 "publisher": self._publisher(), "store-writer": self.writer.run(),
                 "heartbeat": self.registry.heartbeat(), "knobs": self.knob_watcher.run(),
                 "reaper": self.registry.reaper(self.handles, self.run_state.capacity.notify),
                 "status": self.reports.every(),
                 "watchdog": watch(self.run_state, self.handles, self.block_size, self.config.stall_timeout_s)}
        named |= {f"prepare{w.stage}": w.prepare_waves() for w in self.stages}
        named |= {f"stage{w.stage}": w.execute_waves() for w in self.stages}
        named |= {f"link{s}": run_link(self.stages[s], self.stages[s + 1]) for s in range(self.num_stages - 1)}
        tasks = [asyncio.create_task(coro, name=name) for name, coro in named.items()]
        done_wait: asyncio.Task[Any] = asyncio.create_task(self.done.wait())
        finished, _ = await asyncio.wait([done_wait, *tasks], return_when=asyncio.FIRST_COMPLETED)
        if done_wait in finished and not self.run_state.has_work():
            await self.run_state.all_retired()
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
        await self._flush_index()
        await self._drain_writes()
        drained = self.num_finished >= self.workload.num_requests or not self.run_state.has_work()
        if self.config.check_invariants and drained:    # a server stopped with work left is not drained
            await invariants.check_drained(self, tasks)
        return self.result

    async def _drain_writes(self) -> None:
        task = asyncio.create_task(self.writer.run())
        try:
            await self.writer.drain()
        finally:
            task.cancel()

    @property
    def num_finished(self) -> int:
        """Requests that finished or failed so far."""
        return self.run_state.num_ended

    @property
    def next_wave_id(self) -> int:
        return self.run_state.num_planned

    # ---- arrival ------------------------------------------------------------------------------
    def _arrive(self, req: Request, warming: asyncio.Future[Completion | str] | None = None) -> None:
        """``req`` arrives (the one path every request takes); ``warming``: a warm-up request, whose end
        resolves this future and counts nowhere else."""
        if warming is not None:
            self.ends.warming[req.id] = warming
        self.spans[req.id] = self.tel.start(N.REQUEST, {
            N.REQUEST_ID: req.id, N.POLICY: self.policy.name, N.GEN_AI_INPUT_TOKENS: req.num_tokens,
            **self.prefixes.arrive(req)}, root=True)
        refused = refusal(req.num_tokens, self.executor.max_context, self.min_capacity, self.block_size,
                          self.in_force.planner)
        if refused is not None:
            self.ends.fail_unadmitted(req, refused)
            return
        self.run_state.arrive(req)

    def next_arrival(self) -> None:
        """A request finished or failed: report progress, end the run or bring the next arrival."""
        if self.progress is not None:
            self.progress(self.num_finished, self.workload.num_requests)
        if self.num_finished >= self.workload.num_requests:
            self.done.set()
        else:
            self.workload.ended(self.port)

    async def _arrivals(self) -> None:
        """The warm-up, then the source's own arrivals (a task of the run)."""
        await self.warm_up()
        await self.workload.arrivals(self.port)

    # ---- admission ----------------------------------------------------------------------------
    async def _admission_task(self) -> None:
        while True:
            await self.policy.admission.background(self.queue)

    # ---- planning and dispatch --------------------------------------------------------------
    def _apply_pending_knobs(self) -> None:
        if self.warming:                         # the warm-up runs under the starting knobs
            return
        changed = self.in_force.apply_pending()
        if changed is not None:
            self._queue_follows()
            self.result.knob_changes.append((self.tel.now_ns(), changed))
            self.run_state.changed.notify()

    async def _dispatcher(self) -> None:
        run = self.run_state
        while True:
            self._apply_pending_knobs()
            if run.in_flight >= self.in_force.ring:
                await run.changed.wait()
                continue
            admitted_tokens = await self.policy.admission.before_plan(self.queue)
            if self.policy.fill.should_wait(run, self.num_stages, self.knobs.min_wave_tokens):
                run.wake_on_first_stage = True
                await run.changed.wait()
                run.wake_on_first_stage = False
                continue
            wave = self._plan()
            if wave is None:
                await run.changed.wait()
                continue
            wave.broadcast_tokens = self.policy.relay.relayed_tokens(admitted_tokens)
            if self.config.publish_plans:
                plan = WavePlanRecord(wave.id, wave.budget, wave.planned_at, self.policy.name, tuple(
                    PlannedChunk(c.request_id, c.start, c.length, c.reuse_blocks, c.is_last) for c in wave.chunks))
                self.writer.submit(lambda plan=plan: self.store.plan_publish(plan))  # type: ignore[misc]
            for stage in self.stages:
                stage.inbox.put_nowait(wave)

    def _plan(self) -> Wave | None:
        run = self.run_state
        with self.tel.span(N.WAVE_PLAN, cpu=True) as span:
            plan = self.in_force.planner.plan(run.active())
            if plan is None:
                span.set_attribute(N.TOKENS, 0)
                return None
            for name, attributes in self.in_force.events:   # e.g. marks the first wave under new knobs
                self.tel.event(span, name, attributes)
            self.in_force.events.clear()
            wave = Wave(run.num_planned, plan.chunks, plan.budget, now())
            run.planned(wave)
            carried = [self.spans[rid] for rid in dict.fromkeys(c.request_id for c in plan.chunks)]
            for request_span in carried:
                span.add_link(request_span.get_span_context())     # the wave carries these requests
            attributes = {N.WAVE_ID: wave.id, N.BUDGET: plan.budget, N.TOKENS: wave.num_tokens,
                          N.REQUEST_IDS: [c.request_id for c in plan.chunks]}
            span.set_attributes(attributes | {N.NUM_WAVES_READY: plan.ready_waves, N.NUM_IN_FLIGHT: run.in_flight,
                                              N.RING: self.in_force.ring, N.POLICY: self.policy.name})
        # The wave's own trace: its span lives until the wave retires and parents its stage steps.
        wave.span = self.tel.start(N.WAVE, attributes, root=True, link_to=carried)
        return wave

    async def status(self, state: str = "running") -> StatusSnapshot:
        """A status snapshot now (:meth:`runtime.control.status.RunStatus.snapshot`)."""
        return await self.reports.snapshot(state)

    def _plan_retired(self, wave: Wave) -> None:
        if self.config.publish_plans:
            self.writer.submit(lambda: self.store.plan_retire(wave.id))

    async def _publisher(self) -> None:
        """Stages publish attach/detach events to the hint index off the critical path."""
        while True:
            await self.run_state.index_dirty.wait()
            await self._flush_index()

    async def _flush_index(self) -> None:
        """Publish the stages' pending index events; the requests that had ended by then compute
        nothing any more (``RunState.settled``)."""
        mark = self.run_state.settle_mark()
        await self.publisher.flush()
        self.run_state.settled(mark)
