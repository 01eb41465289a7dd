"""A minimal OTLP/HTTP trace receiver: decodes each POST /v1/traces (protobuf) with
opentelemetry-proto and keeps the spans. For the test suite and the telemetry cost benchmark
(scripts/telemetry_cost.sh), where no collector is installed; not a production collector.

    python -m wavepp.telemetry.receiver --port 4318     # prints the span count every second

SIGINT (Ctrl-C) or SIGTERM stops it.
"""

from __future__ import annotations

import argparse
import signal
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)


class OtlpReceiver:
    def __init__(self, port: int = 0, host: str = "127.0.0.1") -> None:
        self.requests: list[ExportTraceServiceRequest] = []
        self.num_spans = 0
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:           # noqa: N802 (http.server's name)
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                if self.path != "/v1/traces" or self.headers.get("Content-Type") != "application/x-protobuf":
                    self.send_response(404 if self.path != "/v1/traces" else 415)
                    self.end_headers()
                    return
                req = ExportTraceServiceRequest.FromString(body)
                with receiver._lock:
                    receiver.requests.append(req)
                    receiver.num_spans += sum(len(ss.spans) for rs in req.resource_spans for ss in rs.scope_spans)
                reply = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, format: str, *args: Any) -> None:
                return None

        self.server = ThreadingHTTPServer((host, port), Handler)
        self.server.daemon_threads = True
        self.port = int(self.server.server_address[1])
        self.endpoint = f"http://{host}:{self.port}"
        self._thread = threading.Thread(target=self.server.serve_forever, name="otlp-receiver", daemon=True)
        self._thread.start()

    def spans(self) -> list[tuple[dict[str, Any], Any]]:
        """(resource attributes, span) of every span received so far."""
        from google.protobuf.json_format import MessageToDict
        out = []
        with self._lock:
            for req in self.requests:
                for rs in req.resource_spans:
                    resource = {kv.key: MessageToDict(kv.value) for kv in rs.resource.attributes}
                    for ss in rs.scope_spans:
                        out += [(resource, s) for s in ss.spans]
        return out

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m wavepp.telemetry.receiver", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--port", type=int, default=4318, help="port to listen on, 0 for any free one (default: 4318)")
    args = p.parse_args()
    stop = threading.Event()
    # Set, not inherited: a shell that starts it in the background (`... &`) leaves SIGINT ignored.
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda signum, frame: stop.set())
    r = OtlpReceiver(args.port)
    print(f"OTLP/HTTP receiver on {r.endpoint}/v1/traces", flush=True)
    while not stop.wait(1.0):
        print(f"spans {r.num_spans}", flush=True)
    r.close()


if __name__ == "__main__":
    main()
