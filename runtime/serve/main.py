"""``wavepp serve``: the runtime as an HTTP server (uvicorn), drained on SIGTERM.

The pipeline loop and the HTTP server share one asyncio event loop. The port is bound before any
work but listens only once the runtime is up; a signal while it starts stops the start (exit 0).
After that, the first SIGTERM (or Ctrl-C) drains: new requests get ``503``, the accepted ones get
up to ``--drain-s`` seconds to finish (what is left then is cancelled, its leases and escrow
released), then the server stops and checks that no stage kept a lease or escrow (exit 0). A
second signal stops at once: every request not yet answered is answered ``503`` (or, past a short
grace, its connection closes), the lease check is skipped, and the server exits 1 with a last line
saying how many it cut.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import signal
import socket
import sys
import time
from types import FrameType
from typing import Any

import h11
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from wavepp.runtime.engines.build import build_engine
from wavepp.runtime.engines.common import store_source
from wavepp.runtime.serve.accepted import Accepted
from wavepp.runtime.serve.app import create_app
from wavepp.runtime.serve.errors import error_body
from wavepp.runtime.serve.middleware import AdmissionGate, BodyLimit
from wavepp.runtime.serve.runtime import RETRY_AFTER_MAX_S, ServerRuntime, engine_config
from wavepp.runtime.serve.tokenizer import load_tokenizer

log = logging.getLogger(__name__)

CUT_GRACE_S = 1.0        # a second signal: how long cut requests' handlers get to write their 503
EXIT_CUT = 1             # the exit code of a server stopped at once by a second signal
CUT_REASON = "the server stopped at once (a second signal) before the request finished"
# How long an idle kept-alive connection stays open: longer than the longest Retry-After a 429 tells
# a client to wait (it comes back on the same connection) and than clients keep idle connections
# themselves (httpx: 5 s), so the client always closes first. At uvicorn's default of 5 s a client
# back after a 5 s Retry-After raced the server's close and saw a ReadError.
KEEP_ALIVE_S = RETRY_AFTER_MAX_S + 15
STOP_RESERVE_S = 0.5     # of --drain-s, kept for what follows the requests' drain: their 503s written, the loop ended
FAILED_GRACE_S = 0.5     # a failed loop: its requests' handlers write their 503 before the server exits


# A Content-Length of more digits than h11 reads (20): a size, but past any --max-body-bytes.
_HUGE_CONTENT_LENGTH = re.compile(rb"^content-length:[ \t]*([0-9]{21,})[ \t]*\r?$", re.IGNORECASE | re.MULTILINE)
HEAD_KEPT = 65536         # the last bytes received outside a body, where a refused request's headers are


class JsonErrorH11(H11Protocol):
    """uvicorn's h11 protocol, with the request it cannot parse (a malformed ``Content-Length``, a
    broken request line) answered in the API's one error shape instead of plain text - and one whose
    Content-Length is too long for h11 to read answered 413, as a shorter one past the limit is
    (:class:`runtime.serve.middleware.BodyLimit`): h11 refuses both alike, so the headers are kept."""

    _head = b""

    def data_received(self, data: bytes) -> None:
        if self.conn.their_state is not h11.SEND_BODY:
            self._head = (self._head + data)[-HEAD_KEPT:]
        super().data_received(data)

    def send_400_response(self, msg: str) -> None:
        huge = _HUGE_CONTENT_LENGTH.search(self._head)
        status, reason, param = (413, b"Content Too Large", "body") if huge else (400, b"Bad Request", None)
        message = (f"the body of a {len(huge.group(1))}-digit Content-Length is larger than the limit" if huge
                   else f"malformed HTTP request: {msg}")
        body = json.dumps(error_body(status, message, param, "invalid_request_error")).encode()
        for event in (h11.Response(status_code=status, reason=reason,
                                   headers=[(b"content-type", b"application/json"),
                                            (b"content-length", str(len(body)).encode()), (b"connection", b"close")]),
                      h11.Data(data=body), h11.EndOfMessage()):
            self.transport.write(self.conn.send(event))
        self.transport.close()


class DrainingServer(uvicorn.Server):
    """uvicorn, with a SIGTERM/SIGINT while the runtime starts stopping the start, the first one
    after it draining the runtime before the server stops, and a second one cutting that short.
    Made on the event loop that serves (its signal handler hands work to that loop)."""

    def __init__(self, config: uvicorn.Config, rt: ServerRuntime, drain_s: float) -> None:
        super().__init__(config)
        self.rt = rt
        self.drain_s = drain_s
        self.drained: int | None = None          # requests cancelled at the drain deadline
        self.deadline: float | None = None       # time.monotonic() by which a drain has stopped everything
        self.cut: int | None = None              # requests cut by a second signal (None: there was none)
        self.stopped_starting: str | None = None  # the signal that stopped the start, if one did
        self._aio = asyncio.get_running_loop()
        self._starting: asyncio.Task[None] | None = None
        self._signals = 0
        self._jobs: set[asyncio.Task[None]] = set()   # the drain and the cut (a task nobody holds may vanish)
        rt.on_failure = lambda: self._spawn(self._failed)

    async def start_runtime(self) -> bool:
        """Start the runtime; False when a signal stopped the start first (:meth:`ServerRuntime.stop`
        then ends what had started)."""
        self._starting = asyncio.create_task(self.rt.start())
        if self.stopped_starting is not None:    # the signal came before the task existed
            self._starting.cancel()
        try:
            await self._starting
        except asyncio.CancelledError:
            if self.stopped_starting is None:    # our own task was cancelled, not the start by a signal
                raise
        return self.stopped_starting is None     # also False when the start ended before the cancel ran

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if self._starting is None or not self._starting.done():      # nothing accepted yet: just stop
            self.stopped_starting = self.stopped_starting or signal.Signals(sig).name
            if self._starting is not None:
                self._aio.call_soon_threadsafe(self._starting.cancel)
            return
        self._signals += 1
        if self._signals == 1:
            self.deadline = time.monotonic() + self.drain_s
            print(f"wavepp serve: {signal.Signals(sig).name}: draining (up to {self.drain_s:g} s), "
                  "new requests get 503", file=sys.stderr, flush=True)
            self._spawn(self._drain)
        elif self._signals == 2:
            self._spawn(self._cut)

    def _spawn(self, job: Any) -> None:
        """Run ``job()`` on the server's loop (a signal handler runs between two of its steps)."""
        def start() -> None:
            task = asyncio.get_running_loop().create_task(job())
            self._jobs.add(task)
            task.add_done_callback(self._jobs.discard)
        self._aio.call_soon_threadsafe(start)

    async def _drain(self) -> None:
        """``--drain-s`` bounds the whole shutdown: the accepted requests get all of it but a reserve;
        the answers written at the drain's end, uvicorn's wait for its connections and the loop's end
        of its waves in flight share that reserve (:meth:`ServerRuntime.stop` cancels the loop at the
        deadline)."""
        assert self.deadline is not None
        reserve = min(STOP_RESERVE_S, self.drain_s / 4)     # for the answers the drain's end writes, and the stop
        self.drained = await self.rt.drain(self.deadline - reserve - time.monotonic())
        if not self.rt.cut_short:                  # a cut stops the server itself
            # uvicorn types it int but hands it to asyncio.wait_for, which takes a fraction of a second
            self.config.timeout_graceful_shutdown = max(self.deadline - time.monotonic(), 0.0)  # type: ignore[assignment]
            self.should_exit = True

    async def _failed(self) -> None:
        """The loop failed (a stage died, a link timed out, the store gone past its deadline): every
        request was answered 503; give their handlers a moment to write it, then stop, so that the
        process exits 1 with the loop's error as its last line and its supervisor (compose's
        ``restart``, systemd, Kubernetes) starts a new server. A server left up would answer /health
        forever and nothing would restart it."""
        await self._handlers_done(FAILED_GRACE_S)
        self.should_exit = True

    async def _cut(self) -> None:
        """A second signal: answer every unanswered request 503 now, give their handlers a moment
        to write it, cancel the handlers still running after that (:class:`CutGuard` answers for
        them), then stop without waiting for connections."""
        self.cut = self.rt.cut(CUT_REASON)
        await self._handlers_done(CUT_GRACE_S)     # the cut requests' handlers write their 503
        for task in self.server_state.tasks:         # still busy (a body still arriving, a store call)
            task.cancel()
        await self._handlers_done(CUT_GRACE_S)
        self.should_exit = self.force_exit = True

    async def _handlers_done(self, timeout_s: float) -> None:
        """Wait until no request handler runs, or ``timeout_s``."""
        if self.server_state.tasks:
            await asyncio.wait(list(self.server_state.tasks), timeout=timeout_s)


class CutGuard:
    """ASGI middleware: a request still running when a second signal cut the server short has its
    handler cancelled (:meth:`DrainingServer._cut`); that cancel is the shutdown, not a fault, so it
    ends here - answered a JSON 503 when nothing of its response was sent yet, else left to uvicorn,
    which closes the connection - instead of reaching uvicorn as a traceback and a text 500."""

    def __init__(self, app: Any, rt: ServerRuntime) -> None:
        self.app = app
        self.rt = rt

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def tracked(message: dict[str, Any]) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, tracked)
        except asyncio.CancelledError:
            if not self.rt.cut_short:
                raise
            if not started:
                body = json.dumps(error_body(503, CUT_REASON, None, "service_unavailable")).encode()
                await send({"type": "http.response.start", "status": 503,
                            "headers": [(b"content-type", b"application/json"),
                                        (b"content-length", str(len(body)).encode()), (b"retry-after", b"5")]})
                await send({"type": "http.response.body", "body": body})
            # else the response is half sent: returning leaves uvicorn to close the connection


def autopilot_settings(settings: dict[str, Any]) -> Any:
    """The autopilot the settings ask for (None: off); ValueError names what is wrong."""
    from wavepp.runtime.autopilot.settings import from_dict, parse_bounds
    if settings["autopilot"] == "off":
        return None
    raw: dict[str, Any] = {"mode": settings["autopilot"], "window_s": settings["autopilot_window"]}
    if settings["autopilot_bounds"] is not None:
        raw["bounds"] = parse_bounds(settings["autopilot_bounds"])
    return from_dict(raw)


def run_server(settings: dict[str, Any], announce: Any = print) -> int:
    """Build everything from ``settings`` (ValueError: bad input), serve until drained; 0 when clean."""
    from wavepp.runtime.control.knobs import KnobError
    from wavepp.telemetry.config import TelemetryConfig
    from wavepp.telemetry.setup import configure
    configure(TelemetryConfig.from_env())          # OTEL_*: OTLP export, sampling (a bad value: one line)
    engine = build_engine(engine_config(settings))
    try:
        try:
            knobs = engine.default_knobs().replace(policy=settings["policy"])
        except KnobError as exc:
            raise ValueError(str(exc)) from None
        tokenizer = load_tokenizer(settings["tokenizer"], engine.vocab_size)
        rt = ServerRuntime(engine, knobs, settings["max_queue"], settings["max_prompt_tokens"],
                           settings["store_deadline"], settings["check_invariants"], settings["span_ring"],
                           autopilot_settings(settings))
        served = settings["served_model_name"] or settings["model"] or ("tiny-llama" if engine.name == "torch"
                                                                         else "llama-3-8b")
        app = Accepted(CutGuard(AdmissionGate(BodyLimit(create_app(rt, served, tokenizer, settings["admin_token"]),
                                                        settings["max_body_bytes"]), rt), rt))
        from wavepp.runtime.process_gc import collect_as_long_running
        collect_as_long_running()       # a real-time loop: runtime/process_gc.py
        return asyncio.run(_main(rt, app, settings, served, announce))
    finally:
        engine.close()


async def _main(rt: ServerRuntime, app: Any, settings: dict[str, Any], served: str, announce: Any) -> int:
    # The port is bound now - a port in use is one line before any work - but listens only once the
    # runtime is up (when /ready would answer 200): until then a client's connect is refused at once,
    # so it retries or its balancer picks another server, instead of being accepted and hearing
    # nothing for as long as the start takes (the stages' build, the store). Serving 503 while
    # starting would also answer, but needs the HTTP server running beside a half-built runtime.
    sock = _bind(settings["host"], settings["port"])
    config = uvicorn.Config(app, http=JsonErrorH11, lifespan="off", access_log=False, log_level="warning",
                            timeout_graceful_shutdown=5, timeout_keep_alive=KEEP_ALIVE_S)
    server = DrainingServer(config, rt, settings["drain_s"])
    # From here to the end a signal goes to the server: while starting it stops the start, then it
    # drains (uvicorn's serve() installs the same handler again while it runs).
    with server.capture_signals():
        try:
            if not await server.start_runtime():
                return _stopped_starting(server)
            _listen(sock, settings["host"], settings["port"])
            host, port = sock.getsockname()[:2]
            serving = asyncio.create_task(server.serve(sockets=[sock]))
            while not server.started and not serving.done():
                await asyncio.sleep(0.02)
            announce(json.dumps({"listening": f"http://{host}:{port}", "engine": rt.engine.name, "model": served,
                                 "pp": rt.engine.pp, "store": store_source(rt.engine.store_url), "run": rt.run.id}),
                     flush=True)
            await serving
        finally:
            await rt.stop(server.deadline)
    if rt.error is not None:
        raise RuntimeError(f"the pipeline loop stopped: {rt.error}")
    if server.cut is not None:
        print(f"wavepp serve: stopped at once (a second signal): {server.cut} request(s) cut (answered 503 or "
              "their connection closed); leases and escrow not checked", file=sys.stderr, flush=True)
        return EXIT_CUT
    left = server.drained or 0
    print(f"wavepp serve: stopped ({left} request(s) cancelled at the drain deadline)" if left else
          "wavepp serve: stopped (every accepted request was answered)", file=sys.stderr, flush=True)
    return 0


def _stopped_starting(server: DrainingServer) -> int:
    # Said once the start's own finally has run (the caller's rt.stop), so this is the last line.
    print(f"wavepp serve: {server.stopped_starting} while starting: stopped (no request was accepted)",
          file=sys.stderr, flush=True)
    return 0


def _bind(host: str, port: int) -> socket.socket:
    """The server's socket, bound (the port is taken) but not listening yet."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    # Accepted connections inherit it: a response written in two parts (headers, body) is not held
    # back by Nagle until the client's delayed ACK (40 ms per request on a kept-alive connection).
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        sock.bind((host, port))
    except (OSError, OverflowError) as exc:
        sock.close()
        raise ValueError(f"cannot listen on {host}:{port}: {getattr(exc, 'strerror', None) or exc}") from None
    sock.set_inheritable(True)
    return sock


def _listen(sock: socket.socket, host: str, port: int) -> None:
    # Can still fail: on Linux another SO_REUSEADDR socket may bind the port while neither listens,
    # and the first to listen keeps it (the same one line, only after the start).
    try:
        sock.listen(2048)
    except OSError as exc:
        sock.close()
        raise ValueError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
