"""The embedded runtime: ``make demo`` runs the pipeline loop and the dashboard with no services.

The loop runs on its own asyncio event loop (real time) in a thread of a child process; the
dashboard reads its bounded span ring and writes knobs into its memory store through a local
socket, and the runtime's knob watcher picks them up at the next wave boundary.

The runtime may stop (it finished its requests, or crashed); the child keeps serving what it
last had - spans, status, knobs - with the reason, and can start it again on the dashboard's
request (the Restart button), so the dashboard shows a banner, never a traceback.
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
import os
import secrets
import tempfile
import threading
from collections.abc import Coroutine
from multiprocessing.managers import BaseManager
from typing import Any

from wavepp.runtime.autopilot.runner import AutopilotRunner
from wavepp.runtime.autopilot.settings import AutopilotSettings, changed
from wavepp.runtime.control.knobs import Knobs, validated_values
from wavepp.runtime.engines.build import build_engine
from wavepp.runtime.engines.config import EngineConfig
from wavepp.runtime.loop import LoopConfig, PipelineLoop
from wavepp.runtime.process_gc import collect_as_long_running
from wavepp.runtime.runs.meta import describe_run
from wavepp.runtime.runs.runfile import RunInfo
from wavepp.runtime.sources.workloads import Workload, parse_workload
from wavepp.store.base import KnobsRecord, StoreError
from wavepp.store.memory import MemoryStore
from wavepp.store.records import StatusSnapshot
from wavepp.telemetry.ring import SpanRing

log = logging.getLogger(__name__)

FOREVER = 10**12        # requests: a live runtime runs until it is stopped


class EmbeddedRuntime:
    def __init__(self, engine: Any, workload: str = "reuse90", concurrency: int = 32,
                 prompt_tokens: int | None = None, knobs: Knobs | None = None, seed: int = 0,
                 requests: int = FOREVER, autopilot: AutopilotSettings | None = None) -> None:
        """``autopilot``: run it beside the loop (:mod:`runtime.autopilot`), fed from the span ring."""
        self.engine = engine
        self.spec = parse_workload(workload)
        self.concurrency = concurrency
        self.prompt_tokens = prompt_tokens or engine.default_prompt_tokens()
        self.knobs = knobs or Knobs()
        self.seed = seed
        self.requests = requests
        self.autopilot = autopilot
        self.run = RunInfo.new(self.knobs.policy, self.spec.name, concurrency, engine.name, "embedded")
        self.ring = SpanRing()
        self.store = MemoryStore()
        self.loop: PipelineLoop
        self.error: str | None = None          # why the runtime is not running (finished or crashed)
        self.ready = False
        self._aio: asyncio.AbstractEventLoop | None = None
        self._started = threading.Event()
        self._thread = threading.Thread(target=self._main, name="wavepp-runtime", daemon=True)

    def start(self, timeout_s: float = 30.0) -> EmbeddedRuntime:
        self._thread.start()
        self._started.wait(timeout_s)
        return self

    @property
    def running(self) -> bool:
        return self._aio is not None and self._aio.is_running()

    def call(self, coro: Coroutine[Any, Any, Any], timeout_s: float = 5.0) -> Any:
        """Run a store coroutine on the runtime's loop from another thread and wait for its result;
        once the runtime stopped (its loop is closed), on a loop of its own: the store stays readable."""
        if not self.running:
            return asyncio.run(coro)
        assert self._aio is not None
        return asyncio.run_coroutine_threadsafe(coro, self._aio).result(timeout_s)

    def stop(self) -> None:
        if self._aio is not None and self.ready:
            self._aio.call_soon_threadsafe(self.loop.done.set)
        self._thread.join(timeout=10)

    def _main(self) -> None:
        try:
            asyncio.run(self._run())
            self.error = f"the embedded runtime finished its {self.requests} requests"
        except Exception as exc:       # the dashboard shows it in a banner; nothing else stops
            self.error = f"the embedded runtime stopped: {type(exc).__name__}: {exc}"
            log.exception("embedded runtime stopped")
            self._started.set()

    async def _run(self) -> None:
        self._aio = asyncio.get_running_loop()
        parts = self.engine.build()
        tel = self.engine.telemetry(self.run, keep=False, ring=self.ring)   # spans go to the bounded ring only
        workload = Workload(self.spec, self.requests, self.prompt_tokens, self.engine.block_size,
                            self.engine.vocab_size, self.seed)
        # What this run is (engine, model, stages, workload, knobs: runtime.runs.meta), published by the
        # loop as `wavepp bench` and `wavepp serve` publish it: the dashboard's Preview replays the run from it.
        meta = describe_run(self.engine, self.run, self.knobs, [h.capacity for h in parts.handles])
        self.loop = PipelineLoop(parts, self.store, self.knobs, workload, tel, LoopConfig(self.concurrency, meta=meta))
        run = asyncio.create_task(self.loop.run())
        if self.autopilot is not None and self.autopilot.mode != "off":
            runner = AutopilotRunner(self.loop, self.autopilot, virtual=False, meta=meta)
            runner.feed_from(self.ring)
            pilot = asyncio.create_task(runner.run(), name="autopilot")
            run.add_done_callback(lambda _: pilot.cancel())
        published = asyncio.create_task(self.loop.published.wait())
        await asyncio.wait([run, published], return_when=asyncio.FIRST_COMPLETED)   # started, or failed to
        published.cancel()
        self.ready = True
        self._started.set()
        await run


# ---- the runtime in a child process ---------------------------------------------------------
# Streamlit renders in the same interpreter as whatever runs beside it; sharing the GIL with the
# dashboard would put the dashboard's own rendering into the pipeline's bubbles. So `wavepp
# dashboard` runs the embedded runtime in a child process and talks to it over a local socket
# (multiprocessing.managers): still no external service.



class _Facade:
    """What the dashboard may ask of the runtime (runs in the child, called through a proxy)."""

    def __init__(self, runtime: EmbeddedRuntime, runtime_args: dict[str, Any]) -> None:
        self.rt = runtime
        self.runtime_args = runtime_args

    def restart(self) -> None:
        """A stopped runtime starts again with the arguments it was first given (a fresh store)."""
        if self.rt.running:
            return
        self.rt = EmbeddedRuntime(self.rt.engine, **self.runtime_args).start()

    def run(self) -> tuple[str, str]:
        return self.rt.run.id, self.rt.run.label

    def error(self) -> str | None:
        return self.rt.error

    def read(self, after: int) -> tuple[list[dict[str, Any]], int]:
        return self.rt.ring.read(after)

    def status(self, count: int) -> list[StatusSnapshot]:
        if not self.rt.ready:
            return []
        return list(self.rt.loop.result.status)[-count:]

    def knobs(self) -> KnobsRecord:
        record: KnobsRecord = self.rt.call(self.rt.store.knobs_get())
        return record

    def run_meta(self) -> dict[str, Any] | None:
        """The description the runtime published when its run started (None before it did)."""
        meta: dict[str, Any] | None = self.rt.call(self.rt.store.run_meta_get(self.rt.run.id))
        return meta

    def knob_history(self, count: int) -> list[dict[str, Any]]:
        history: list[dict[str, Any]] = self.rt.call(self.rt.store.knobs_history(count))
        return history

    def set_knobs(self, changes: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        if not self.rt.running:
            raise StoreError(f"{self.rt.error or 'the embedded runtime is not running'}: "
                             "restart it before changing knobs")
        record = self.rt.call(self.rt.store.knobs_set(changes, validate=validated_values))
        return record.version, record.values

    def autopilot(self) -> dict[str, Any] | None:
        """The autopilot's record in the runtime's store (None: the runtime runs none and none was written)."""
        record: dict[str, Any] | None = self.rt.call(self.rt.store.autopilot_get())
        return record

    def set_autopilot(self, changes: dict[str, Any]) -> dict[str, Any]:
        """``changes`` over the record, checked (SettingsError: nothing written); the new record."""
        settings = changed(self.autopilot(), changes)
        self.rt.call(self.rt.store.autopilot_put(settings.as_dict()))
        return settings.as_dict()


class _Manager(BaseManager):
    pass


def serve(engine_config: EngineConfig, runtime_args: dict[str, Any], address: str, authkey: bytes,
          ready: Any) -> None:
    """Child process: start the runtime and serve it to the dashboard until killed."""
    engine = build_engine(engine_config)
    collect_as_long_running()       # a real-time loop: runtime/process_gc.py
    runtime = EmbeddedRuntime(engine, **runtime_args).start()
    facade = _Facade(runtime, runtime_args)
    _Manager.register("runtime", callable=lambda: facade)
    server = _Manager(address=address, authkey=authkey).get_server()
    ready.set()
    server.serve_forever()


class RemoteRuntime:
    """The dashboard's handle on a runtime served by :func:`serve` in a child process (same
    interface it needs). :meth:`restart` starts a stopped runtime again, in a new child process
    when the old one died."""

    def __init__(self, engine_config: EngineConfig, runtime_args: dict[str, Any], timeout_s: float = 60.0) -> None:
        self._args = (engine_config, runtime_args, timeout_s)
        self._spawn()

    @property
    def engine_config(self) -> EngineConfig:
        """What the runtime's engine was built from: a what-if replay rebuilds its sim."""
        return self._args[0]

    @property
    def runtime_args(self) -> dict[str, Any]:
        return dict(self._args[1])

    def _spawn(self) -> None:
        engine_config, runtime_args, timeout_s = self._args
        ctx = multiprocessing.get_context("spawn")
        address = os.path.join(tempfile.mkdtemp(prefix="wavepp-"), "runtime.sock")
        authkey = secrets.token_bytes(16)
        ready = ctx.Event()
        self.proc = ctx.Process(target=serve, args=(engine_config, runtime_args, address, authkey, ready),
                                name="wavepp-runtime", daemon=True)
        self.proc.start()
        if not ready.wait(timeout_s):
            self.proc.kill()
            raise RuntimeError("the embedded runtime did not start")
        _Manager.register("runtime")
        manager = _Manager(address=address, authkey=authkey)
        manager.connect()
        self._rt = manager.runtime()          # type: ignore[attr-defined]
        self.run_id, self.label = self._rt.run()

    @property
    def error(self) -> str | None:
        return self._rt.error()  # type: ignore[no-any-return]

    def read(self, after: int) -> tuple[list[dict[str, Any]], int]:
        return self._rt.read(after)  # type: ignore[no-any-return]

    def status(self, count: int = 5000) -> list[StatusSnapshot]:
        return self._rt.status(count)  # type: ignore[no-any-return]

    def knobs(self) -> KnobsRecord:
        return self._rt.knobs()  # type: ignore[no-any-return]

    def knob_history(self, count: int = 200) -> list[dict[str, Any]]:
        return self._rt.knob_history(count)  # type: ignore[no-any-return]

    def run_meta(self) -> dict[str, Any] | None:
        return self._rt.run_meta()  # type: ignore[no-any-return]

    def set_knobs(self, changes: dict[str, Any]) -> KnobsRecord:
        version, values = self._rt.set_knobs(changes)
        return KnobsRecord(version, values)

    def autopilot(self) -> dict[str, Any] | None:
        return self._rt.autopilot()  # type: ignore[no-any-return]

    def set_autopilot(self, changes: dict[str, Any]) -> dict[str, Any]:
        return self._rt.set_autopilot(changes)  # type: ignore[no-any-return]

    def restart(self) -> None:
        if self.proc.is_alive():
            self._rt.restart()
            self.run_id, self.label = self._rt.run()          # a new run: a new id
        else:                                  # the child process itself died (killed, crashed)
            self.proc.join(0)
            self._spawn()


def start_child(engine_config: EngineConfig, runtime_args: dict[str, Any],
                timeout_s: float = 60.0) -> tuple[RemoteRuntime, Any]:
    """Start the runtime in a child process; returns the handle and the process."""
    remote = RemoteRuntime(engine_config, runtime_args, timeout_s)
    return remote, remote.proc


CURRENT: RemoteRuntime | None = None       # set by `wavepp dashboard` before the server starts
