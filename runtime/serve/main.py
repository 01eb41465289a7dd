"""``wavepp serve``: the runtime as an HTTP server (uvicorn), drained on SIGTERM.

The pipeline loop and the HTTP server share one asyncio event loop. The first SIGTERM (or
Ctrl-C) drains: new requests get ``503``, the accepted ones get up to ``--drain-s`` seconds to
finish (what is left then is cancelled, its leases and escrow released), then the server stops
and checks that no stage kept a lease or escrow. A second signal stops at once.
"""

from __future__ import annotations

import asyncio
import json
import logging
import signal
import socket
import sys
from pathlib import Path
from types import FrameType
from typing import Any

import uvicorn

from runtime.engines.common import store_source
from runtime.serve.app import AdmissionGate, BodyLimit, create_app
from runtime.serve.runtime import ServerRuntime, build_engine

log = logging.getLogger(__name__)


class Tokenizer:
    """A Hugging Face fast tokenizer (``tokenizer.json``, in a model directory or given directly)."""

    def __init__(self, path: str) -> None:
        try:
            from tokenizers import Tokenizer as HfTokenizer
        except ImportError:
            raise ValueError("--tokenizer needs the tokenizers package (pip install tokenizers)") from None
        file = Path(path) / "tokenizer.json" if Path(path).is_dir() else Path(path)
        if not file.is_file():
            raise ValueError(f"--tokenizer: no tokenizer.json at {str(file)!r}")
        try:
            self._tok = HfTokenizer.from_file(str(file))
        except Exception as exc:          # noqa: BLE001 - the library's own errors vary; one line
            raise ValueError(f"--tokenizer: cannot read {str(file)!r}: {str(exc).splitlines()[0][:160]}") from None

    def encode(self, text: str) -> list[int]:
        return list(self._tok.encode(text).ids)

    def decode(self, ids: list[int]) -> str:
        return str(self._tok.decode(ids))


class DrainingServer(uvicorn.Server):
    """uvicorn, with the first SIGTERM/SIGINT draining the runtime before the server stops."""

    def __init__(self, config: uvicorn.Config, rt: ServerRuntime, drain_s: float) -> None:
        super().__init__(config)
        self.rt = rt
        self.drain_s = drain_s
        self.drained: int | None = None          # requests cancelled at the drain deadline
        self._aio: asyncio.AbstractEventLoop | None = None
        self._signalled = False

    async def serve(self, sockets: Any = None) -> None:
        self._aio = asyncio.get_running_loop()
        await super().serve(sockets)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if self._signalled or self._aio is None:     # a second signal: stop now
            self.should_exit = self.force_exit = True
            return
        self._signalled = True
        print(f"wavepp serve: {signal.Signals(sig).name}: draining (up to {self.drain_s:g} s), new requests get 503",
              file=sys.stderr, flush=True)
        self._aio.call_soon_threadsafe(lambda: self._aio.create_task(self._drain()))  # type: ignore[union-attr]

    async def _drain(self) -> None:
        self.drained = await self.rt.drain(self.drain_s)
        self.should_exit = True


def run_server(settings: dict[str, Any], announce: Any = print) -> int:
    """Build everything from ``settings`` (ValueError: bad input), serve until drained; 0 when clean."""
    from runtime.knobs import KnobError
    from telemetry.config import TelemetryConfig
    from telemetry.setup import configure
    configure(TelemetryConfig.from_env())          # OTEL_*: OTLP export, sampling (a bad value: one line)
    engine = build_engine(settings)
    try:
        try:
            knobs = engine.default_knobs().replace(policy=settings["policy"])
        except KnobError as exc:
            raise ValueError(str(exc)) from None
        tokenizer = Tokenizer(settings["tokenizer"]) if settings["tokenizer"] else None
        rt = ServerRuntime(engine, knobs, settings["max_queue"], settings["max_prompt_tokens"],
                           settings["store_deadline"])
        served = settings["served_model_name"] or settings["model"] or ("tiny-llama" if engine.name == "torch"
                                                                         else "llama-3-8b")
        app = AdmissionGate(BodyLimit(create_app(rt, served, tokenizer, settings["admin_token"]),
                                      settings["max_body_bytes"]), rt)
        return asyncio.run(_main(rt, app, settings, served, announce))
    finally:
        engine.close()


async def _main(rt: ServerRuntime, app: Any, settings: dict[str, Any], served: str, announce: Any) -> int:
    sock = _listen(settings["host"], settings["port"])       # a port in use is one line before any work
    await rt.start()
    config = uvicorn.Config(app, lifespan="off", access_log=False, log_level="warning", timeout_graceful_shutdown=5)
    server = DrainingServer(config, rt, settings["drain_s"])
    host, port = sock.getsockname()[:2]
    serving = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started and not serving.done():
        await asyncio.sleep(0.02)
    announce(json.dumps({"listening": f"http://{host}:{port}", "engine": rt.engine.name, "model": served,
                         "pp": rt.engine.pp, "store": store_source(rt.engine.store_url), "run": rt.run.id}),
             flush=True)
    try:
        await serving
    finally:
        await rt.stop()
    if rt.error is not None:
        raise RuntimeError(f"the pipeline loop stopped: {rt.error}")
    left = server.drained or 0
    print(f"wavepp serve: stopped ({left} request(s) cancelled at the drain deadline)" if left else
          "wavepp serve: stopped (every accepted request was answered)", file=sys.stderr, flush=True)
    return 0


def _listen(host: str, port: int) -> socket.socket:
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
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock
