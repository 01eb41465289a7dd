"""Faults of the OTLP endpoint: a collector that is down, and one that accepts connections and
never answers (a black hole). Spans are exported off the loop's thread (telemetry/batch.py): the
requests go on, the drops are counted (``wavepp_spans_dropped_total{exporter="otlp"}``) and said
once, and export resumes when the collector is back."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

SIM = ("--engine", "sim", "--pp", "2")
EXPORT_TIMEOUT_MS = "1000"


class Collector:
    """A stand-in OTLP/HTTP collector on one port: ``down`` (nothing listens), ``up`` (every POST
    to /v1/traces answered 200 and counted) or ``hole`` (connections accepted, never answered)."""

    def __init__(self) -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = int(s.getsockname()[1])
        self.posts: list[float] = []          # when each export arrived
        self._http: ThreadingHTTPServer | None = None
        self._hole: socket.socket | None = None
        self._held: list[socket.socket] = []

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def up(self) -> None:
        self.down()
        posts = self.posts

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:      # noqa: N802 - http.server's name
                self.rfile.read(int(self.headers.get("content-length") or 0))
                posts.append(time.monotonic())
                self.send_response(200)
                self.send_header("content-type", "application/x-protobuf")
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self._http = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        threading.Thread(target=self._http.serve_forever, daemon=True).start()

    def hole(self) -> None:
        self.down()
        self._hole = socket.socket()
        self._hole.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._hole.bind(("127.0.0.1", self.port))
        self._hole.listen(64)
        hole = self._hole

        def accept() -> None:
            while True:
                try:
                    conn, _ = hole.accept()
                except OSError:
                    return
                self._held.append(conn)      # held open, never read, never answered

        threading.Thread(target=accept, daemon=True).start()

    def down(self) -> None:
        if self._http is not None:
            self._http.shutdown()
            self._http.server_close()
            self._http = None
        if self._hole is not None:
            try:
                self._hole.shutdown(socket.SHUT_RDWR)      # wakes its accept(): a close alone would not
            except OSError:
                pass
            self._hole.close()
            self._hole = None
        for conn in self._held:
            conn.close()
        self._held.clear()


def _env(collector: Collector) -> dict[str, str]:
    return {"OTEL_EXPORTER_OTLP_ENDPOINT": collector.endpoint, "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
            "OTEL_EXPORTER_OTLP_TIMEOUT": EXPORT_TIMEOUT_MS}


def test_an_otlp_collector_that_is_down(start_server: Callable[..., Any], load: Any, until: Callable[..., float],
                                        fault: Any, metric: Callable[..., float]) -> None:
    """The OTLP collector down (nothing listens on its port)."""
    collector = Collector()
    server = start_server(*SIM, env=_env(collector))

    def dropped() -> float:
        return metric(server, "wavepp_spans_dropped_total", exporter="otlp")
    try:
        fault.inject()                         # down from the start: the load's spans have nowhere to go
        with load(server.url, server.info["model"]) as clients:
            fault.detect("wavepp_spans_dropped_total{exporter=otlp} > 0", until(lambda: dropped() > 0, 30))
            until(lambda: clients.statuses()[200] >= 20, why="answers while the collector is down")
            fault.clear()
            collector.up()
            fault.recover("an export reached the collector", until(lambda: collector.posts, 30))
        assert set(clients.statuses()) == {200}, clients.statuses()
        fault.facts |= {"answered": clients.statuses()[200], "dropped": int(dropped())}
        assert server.stop() == 0
        assert server.errors().count("dropping spans, export failed") == 1
    finally:
        collector.down()


def test_an_otlp_black_hole(start_server: Callable[..., Any], load: Any, until: Callable[..., float],
                            fault: Any, metric: Callable[..., float]) -> None:
    """The OTLP collector a black hole (accepts, never answers; export timeout 1 s)."""
    collector = Collector()
    collector.up()
    server = start_server(*SIM, env=_env(collector))

    def dropped() -> float:
        return metric(server, "wavepp_spans_dropped_total", exporter="otlp")
    try:
        with load(server.url, server.info["model"]) as clients:
            until(lambda: len(collector.posts) >= 2, 30, why="exports while the collector answers")
            before = dropped()
            fault.inject()
            collector.hole()
            fault.detect("wavepp_spans_dropped_total{exporter=otlp} rose",
                         until(lambda: dropped() > before, 30))
            # The requests are not held up by the exports that hang: answers go on meanwhile.
            answered = clients.statuses()[200]
            until(lambda: clients.statuses()[200] >= answered + 10, 30, why="answers while exports hang")
            fault.clear()
            seen = len(collector.posts)
            collector.up()
            fault.recover("an export reached the collector", until(lambda: len(collector.posts) > seen, 30))
        assert set(clients.statuses()) == {200}, clients.statuses()
        during = [a for a in clients.snapshot() if fault.injected < a.ended < fault.cleared]
        fault.facts |= {"answered": clients.statuses()[200], "answered in the hole": len(during),
                        "dropped": int(dropped())}
        assert server.stop() == 0
    finally:
        collector.down()
