"""The server's runtime: one engine, one store, one pipeline loop fed by clients.

:class:`ServerRuntime` builds what ``wavepp bench`` builds for one run - the engine's stages, the
store, the telemetry (the span stream on a Redis store, OTLP when ``OTEL_*`` says so) - but runs
the loop with a :class:`runtime.sources.server.ServerSource`, on the HTTP server's own event loop,
until it is stopped. Requests go in through :meth:`ServerRuntime.prefill`.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import threading
import time
from array import array
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from wavepp.runtime.autopilot.runner import AutopilotRunner
from wavepp.runtime.autopilot.settings import AutopilotSettings
from wavepp.runtime.clock import now
from wavepp.runtime.control.knobs import Deployment, Knobs, check_block_size
from wavepp.runtime.engines.base import EngineParts
from wavepp.runtime.engines.calibrate import check_profile
from wavepp.runtime.engines.common import store_source
from wavepp.runtime.engines.config import EngineConfig, SimConfig, TorchConfig
from wavepp.runtime.figures.idle_causes import LiveIdle
from wavepp.runtime.kvcache.hashing import block_hashes
from wavepp.runtime.loop import LoopConfig, PipelineLoop
from wavepp.runtime.policies import get_policy
from wavepp.runtime.policies.base import Policy
from wavepp.runtime.request import Request
from wavepp.runtime.runs.meta import describe_run
from wavepp.runtime.runs.runfile import RunInfo
from wavepp.runtime.serve.config import SPAN_RING
from wavepp.runtime.serve.drain_rate import DrainRate
from wavepp.runtime.sources.server import Outcome, ServerSource
from wavepp.store.base import Store
from wavepp.store.resilient import ResilientStore
from wavepp.telemetry.metrics import process_metrics
from wavepp.telemetry.ring import SpanRing
from wavepp.telemetry.setup import Telemetry

log = logging.getLogger(__name__)

READY_PROBE_S = 1.0          # /ready: the store must answer within this
IDLE_RESTART_SPANS = 100_000  # the live idle split holds about this many spans at most
RETRY_AFTER_MAX_S = 60       # a 429's Retry-After is at most this
CUT_STOP_S = 2.0             # a second signal: the loop gets this long to end its tasks, then is cancelled


def process_figures() -> dict[str, int]:
    """This process's resident memory, threads, open file descriptors and asyncio tasks (a soak
    reads them to find leaks; Linux ``/proc``, 0 where it cannot be read)."""
    rss = fds = 0
    try:
        rss = int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        fds = len(os.listdir("/proc/self/fd"))
    except (OSError, ValueError, IndexError):
        pass
    return {"pid": os.getpid(), "rss_bytes": rss, "threads": threading.active_count(), "fds": fds,
            "tasks": len(asyncio.all_tasks())}


class NotServing(Exception):
    """The runtime does not take requests now (starting, draining, or stopped): HTTP 503."""


@dataclass(frozen=True, slots=True)
class PrefillResult:
    request_id: str
    prompt_tokens: int
    first_token: int | None
    reused_tokens: int
    block_tables: tuple[tuple[int, ...], ...]     # per stage: the request's KV blocks (the decode side's handle)
    prefill_s: float                              # arrival in the loop to the last stage's completion
    server_s: float                               # accepted to answered, wall clock

    @property
    def computed_tokens(self) -> int:
        return self.prompt_tokens - self.reused_tokens


class RequestFailed(Exception):
    """The runtime could not prefill the request (its one-line reason)."""


def engine_config(settings: dict[str, Any]) -> EngineConfig:
    """The engine the settings name (real time: a server answers on the wall clock)."""
    if settings["engine"] == "torch":
        model, profile = settings["model"] or "tiny-llama", settings.get("sim_profile")
        if profile:                     # refused at start, not at the autopilot's first search
            try:
                check_profile(profile, model, settings["pp"])
            except ValueError as exc:
                raise ValueError(f"--sim-profile: {exc}") from None
        return TorchConfig(model, settings["pp"], settings["block_size"], settings["kv_blocks"],
                           settings["kv_memory_mb"], settings["seed"], store_url=settings["store"],
                           launcher=settings["launcher"], sim_profile=str(Path(profile).resolve()) if profile else None)
    return SimConfig(settings["model"] or "llama-3-8b", settings["hardware"], settings["pp"], settings["block_size"],
                     settings["kv_blocks"], store_url=settings["store"], clock="wall",
                     time_scale=settings["time_scale"])


class ServerRuntime:
    """The loop, its stages and its store for the life of a server."""

    def __init__(self, engine: Any, knobs: Knobs, max_queue: int, max_prompt_tokens: int | None = None,
                 store_deadline_s: float | None = None, check_invariants: bool = False,
                 span_ring: int = SPAN_RING, autopilot: AutopilotSettings | None = None) -> None:
        """``check_invariants``: :mod:`runtime.guards.invariants` after every wave and when the loop drained;
        ``autopilot``: run it beside the loop (:mod:`runtime.autopilot`), fed from the span ring."""
        self.engine = engine
        self.check_invariants = check_invariants
        self.knobs = check_block_size(knobs, engine.block_size)
        # The longest prompt that can ever be served: the model's context, and the smallest stage's KV pool.
        fits = min(engine.capacities) * engine.block_size
        self.max_prompt_tokens = min(max_prompt_tokens or engine.max_context, engine.max_context, fits)
        self.store_deadline_s = store_deadline_s
        self.source = ServerSource(max_queue)
        self.run = RunInfo.new(knobs.policy, "serve", 0, engine.name, store_source(engine.store_url))
        self.ring = SpanRing(span_ring)
        self.metrics = process_metrics()
        # Idle seconds by cause, settled at each scrape from the ring (a bench adds them when its run ends).
        self.idle = LiveIdle(engine.pp)
        self._ring_seen = 0
        self.parts: EngineParts | None = None
        self.store: Store | None = None
        self.tel: Telemetry | None = None
        self.loop: PipelineLoop | None = None
        self.error: str | None = None             # why the loop stopped, when it failed
        self.draining = False
        self.cut_short = False                    # a second signal: stopping at once, see cut()
        self.stopped_at_deadline = False          # the loop was cancelled at the drain's end, see stop()
        self._task: asyncio.Task[Any] | None = None
        self.autopilot_settings = autopilot
        self.autopilot: AutopilotRunner | None = None
        self._pilot_task: asyncio.Task[Any] | None = None
        self._ids = itertools.count()
        self.started_at = time.time()
        self.answered = DrainRate()             # answers per busy second: a 429's Retry-After
        # Called once when the loop fails (a stage died, a link timed out, the store is gone past its
        # deadline): the server then exits so its supervisor starts a new one (wavepp serve sets it).
        self.on_failure: Callable[[], None] | None = None

    # ---- life cycle -----------------------------------------------------------------------------
    async def start(self) -> None:
        """Build the stages, open the store and start the loop (returns once it takes requests)."""
        self.parts = self.engine.build(get_policy(self.knobs.policy).pool)
        self.store = self.parts.store = await self.engine.open_store(self.store_deadline_s)
        if isinstance(self.store, ResilientStore):
            self.store.on_failure.append(self._store_failed)
            self.metrics.store_failures.add(0, {"call": "any", "reason": "unavailable"})
        # A server keeps no span list, only the bounded ring (/v1/spans); the process's metrics (/metrics)
        # and, from OTEL_* / the store, OTLP and the Redis span stream (telemetry.setup).
        self.tel = self.engine.telemetry(self.run, keep=False, ring=self.ring, metrics=self.metrics)
        # What this run is, for viewers of the store (the dashboard's Preview of a live server): the loop
        # publishes it when it starts, and again when the store comes back empty.
        meta = describe_run(self.engine, self.run, self.knobs, [h.capacity for h in self.parts.handles])
        self.loop = PipelineLoop(self.parts, self.store, self.knobs, self.source, self.tel,
                                 LoopConfig(1, meta=meta, check_invariants=self.check_invariants))
        self._task = asyncio.create_task(self.loop.run(), name="pipeline-loop")
        self._task.add_done_callback(self._stopped)
        if self.autopilot_settings is not None and self.autopilot_settings.mode != "off":
            self.autopilot = AutopilotRunner(self.loop, self.autopilot_settings, virtual=False, meta=meta)
            self.autopilot.feed_from(self.ring)
            self._pilot_task = asyncio.create_task(self.autopilot.run(), name="autopilot")
        while not self.source.ready and not self._task.done():
            await asyncio.sleep(0.01)
        if self._task.done():
            self._task.result()          # raises the loop's failure

    def _stopped(self, task: asyncio.Task[Any]) -> None:
        if not task.cancelled() and task.exception() is not None:
            exc = task.exception()
            self.error = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
            log.error("the pipeline loop stopped: %s", self.error)
        self.source.fail_all(self.error or "the server stopped")
        if self.error is not None and self.on_failure is not None:
            self.on_failure()

    @property
    def deployment(self) -> Deployment:
        """What this server's engine fixes: knob writes it takes are validated against this, never
        against the store's deployment record, which any client can write."""
        return Deployment(self.engine.block_size, self.engine.pp)

    @property
    def serving(self) -> bool:
        return self._task is not None and not self._task.done() and self.source.ready

    async def drain(self, deadline_s: float) -> int:
        """Refuse new requests and wait up to ``deadline_s`` for the accepted ones; returns how many
        were still unanswered then (they are cancelled: leases and escrow released)."""
        self.draining = True
        end = time.monotonic() + deadline_s
        while self.source.outstanding and time.monotonic() < end and self.serving:
            await asyncio.sleep(0.05)
        left = self.source.outstanding
        if left and self.serving:
            await self.source.cancel_all("the server shut down before the request finished")
        return left

    def cut(self, reason: str) -> int:
        """Stop serving at once (a second signal): every request not yet answered is answered with
        ``reason`` now, without waiting for the loop to release its lease and escrow - the process is
        ending, and a loop that is stuck is often why a second signal came. Returns how many were cut;
        :meth:`stop` then skips the lease check (those leases are still held)."""
        self.draining = self.cut_short = True
        left = self.source.outstanding
        self.source.fail_all(reason)
        return left

    async def stop(self, deadline: float | None = None) -> None:
        """End the loop, check that no lease or escrow is left, close the store and the telemetry.
        With a ``deadline`` (``time.monotonic()``: the drain's end), a loop still ending its waves in
        flight then is cancelled, and its leases go unchecked, as after a cut."""
        if self._pilot_task is not None:
            self._pilot_task.cancel()
        if self._task is not None and self.loop is not None:
            if not self._task.done():
                self.loop.done.set()
            wait_s = CUT_STOP_S if self.cut_short else None if deadline is None else deadline - time.monotonic()
            if wait_s is not None:   # stopping by a time: a loop slow to end its tasks is cancelled
                await asyncio.wait([self._task], timeout=max(wait_s, 0.0))
                self.stopped_at_deadline = not self._task.done() and not self.cut_short
                self._task.cancel()
            try:
                await self._task
            except (Exception, asyncio.CancelledError):   # noqa: BLE001 - said once by _stopped
                pass
        try:
            if self.parts is not None and self.error is None and not self.cut_short and not self.stopped_at_deadline:
                for h in self.parts.handles:
                    await h.check()
        finally:
            if self.store is not None:
                await self.store.close()
            if self.tel is not None:
                self.tel.shutdown()

    # ---- requests -------------------------------------------------------------------------------
    def can_accept(self) -> bool:
        return self.serving and not self.draining and self.source.can_accept()

    def retry_after_s(self) -> int:
        """Seconds the queue would take to drain at the recent rate (:mod:`runtime.serve.drain_rate`:
        answers per second the server was busy, over its last answers): ``round(queued / rate)``,
        at least 1 and at most ``RETRY_AFTER_MAX_S``; 1 before any answer."""
        rate = self.answered.per_s(time.monotonic(), busy=self.source.outstanding > 0)
        if rate is None:
            return 1
        return max(1, min(RETRY_AFTER_MAX_S, round(self.source.queued / rate)))

    def make_request(self, token_ids: Sequence[int]) -> Request:
        rid = f"http-{self.run.id[-6:]}-{next(self._ids)}"
        tokens = array("I", token_ids)
        return Request(rid, tokens, now(), block_hashes(tokens, self.engine.block_size), "http")

    def submit(self, req: Request) -> asyncio.Future[Outcome]:
        """Hand a request to the loop; NotServing or QueueFull when it cannot take it now."""
        if not self.serving or self.draining:
            raise NotServing("draining: the server is shutting down" if self.draining
                             else f"not serving: {self.error or 'starting'}")
        idle = self.source.outstanding == 0
        future = self.source.submit(req)
        if idle:                                 # the idle time before it is no part of the drain rate
            self.answered.busy(time.monotonic())
        return future

    async def result(self, req: Request, future: asyncio.Future[Outcome], accepted: float) -> PrefillResult:
        outcome = await future
        self.answered.note(time.monotonic())
        if outcome.completion is None:
            raise RequestFailed(outcome.error or "failed")
        c = outcome.completion
        return PrefillResult(req.id, req.num_tokens, c.first_token, c.reused_tokens, c.block_ids,
                             c.prefill_latency, time.monotonic() - accepted)

    async def cancel(self, request_id: str) -> bool:
        return await self.source.cancel(request_id)

    # ---- views ----------------------------------------------------------------------------------
    async def prometheus(self) -> tuple[bytes, str]:
        """The Prometheus exposition of the process's metrics, queue depths and KV blocks as of now."""
        if self.loop is not None and self.serving:
            self.metrics.observe_status(self.loop.policy.name, await self.loop.status())
            self._settle_idle(self.loop.policy)
        if isinstance(self.store, ResilientStore):
            self.metrics.store_up.set(0 if self.store.down else 1)
        if self.tel is not None:
            self.tel.report_dropped()
        return self.metrics.render()

    def _settle_idle(self, policy: Policy) -> None:
        """Feed the spans that reached the ring since the last scrape to the live idle split and add
        what settled to the idle-seconds counters; every IDLE_RESTART_SPANS spans the split starts
        over from the ring's recent spans (bounded memory on a server that runs for days)."""
        spans, self._ring_seen = self.ring.read(self._ring_seen)
        self.idle.add(spans)
        if self.idle.spans_held > IDLE_RESTART_SPANS:
            self.idle.restart(self.ring.read(max(0, self._ring_seen - IDLE_RESTART_SPANS // 2))[0])
        for (stage, cause), seconds in self.idle.settle().items():
            self.metrics.stage_idle.add(seconds, {"policy": policy.name, "stage": stage, "cause": cause})

    def _store_failed(self, call: str, reason: str) -> None:
        self.metrics.store_failures.add(1, {"call": call, "reason": reason})

    async def store_reachable(self) -> bool:
        """The store answers within READY_PROBE_S and is not in an outage (calls failing and retried,
        e.g. writes refused while reads still answer)."""
        if self.store is None:
            return False
        if isinstance(self.store, ResilientStore) and self.store.down:
            return False
        try:
            await asyncio.wait_for(self.store.status_get(), READY_PROBE_S)
        except Exception:            # noqa: BLE001 - any failure means "not ready"
            return False
        return True

    async def state(self) -> dict[str, Any]:
        """The loop's status snapshot (stages, queues) with the server's queue and budget."""
        loop = self.loop
        server = {"queued": self.source.queued, "outstanding": self.source.outstanding,
                  "max_queue": self.source.max_queue, "cancelled": self.source.num_cancelled,
                  "draining": self.draining, "serving": self.serving, "error": self.error,
                  "max_prompt_tokens": self.max_prompt_tokens}
        if loop is None or not self.serving:
            return {"server": server, "run": self.run.id, "process": process_figures()}
        status = (await loop.status()).to_json()
        planner = loop.in_force.planner
        status["budget"] = {"current": getattr(planner, "current", None),
                            "max_wave_tokens": loop.knobs.max_wave_tokens,
                            "min_wave_tokens": loop.knobs.min_wave_tokens, "ring": loop.in_force.ring,
                            "max_leases": loop.knobs.max_leases}
        status["server"] = server
        status["process"] = process_figures()
        return status
