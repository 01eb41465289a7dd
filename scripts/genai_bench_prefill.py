"""genai-bench's CLI with two changes for a prefill server: run by genai-bench's own interpreter.

    .venv-clients/genai-bench/bin/python scripts/genai_bench_prefill.py benchmark ...   (genai-bench's arguments)

genai-bench 0.0.5 computes time per output token over the tokens after the first and rejects a chat record without
one ("tpot must not be None if error_code is None"), so it drops every answer of a server that makes one token - all
of ``wavepp serve``'s - and reports no metrics. Here a one-token answer gets the output metrics genai-bench itself
gives a response without output tokens to time (embeddings, images): zero, the token still counted; its TTFT, input
tokens, end-to-end latency and request counts are genai-bench's own.

With ``GENAI_BENCH_RECORDS=FILE`` each request also carries an ``X-Request-ID`` (genai-bench sends none), and FILE
gets one JSON line per answered request: ``id``, ``sent_ns`` (wall clock, as genai-bench's send is called, just
after it takes its start time) and ``first_ns`` (the first ``data:`` line read: genai-bench takes its first token
as it parses that line), so the server's
span of each request can be found and the client's TTFT split into time before, in and after the server.
"""

from __future__ import annotations

import json
import os
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from genai_bench.cli.cli import cli  # first: locust's gevent patches the standard library
from genai_bench.metrics.request_metrics_collector import RequestMetricsCollector

_calculate = RequestMetricsCollector._calculate_output_metrics


def _output_metrics(self: RequestMetricsCollector, response: Any) -> None:
    _calculate(self, response)
    if self.metrics.num_output_tokens <= 1:
        made = self.metrics.num_output_tokens
        self._reset_output_metrics()
        self.metrics.num_output_tokens = made


def _recorded_post(records: Path) -> Any:
    import requests  # after gevent's patches (ssl among them)

    send = requests.post

    def post(*args: Any, **kwargs: Any) -> Any:
        rid = uuid.uuid4().hex
        kwargs["headers"] = {**(kwargs.get("headers") or {}), "X-Request-ID": rid}
        sent = time.time_ns()
        response = send(*args, **kwargs)
        lines = response.iter_lines

        def iter_lines(*a: Any, **k: Any) -> Any:
            first = None
            for line in lines(*a, **k):
                if first is None and line.strip().startswith(b"data:"):
                    first = time.time_ns()
                    with records.open("a") as out:
                        out.write(json.dumps({"id": rid, "sent_ns": sent, "first_ns": first}) + "\n")
                yield line

        response.iter_lines = iter_lines
        return response
    return post


RequestMetricsCollector._calculate_output_metrics = _output_metrics
if os.environ.get("GENAI_BENCH_RECORDS"):
    path = Path(os.environ["GENAI_BENCH_RECORDS"])
    path.parent.mkdir(parents=True, exist_ok=True)
    import requests

    requests.post = _recorded_post(path)

if __name__ == "__main__":
    sys.exit(cli())
