"""WavePP's metrics through the OpenTelemetry metrics SDK, exposed in Prometheus text format.

Public API (framework-free; ``wavepp serve`` mounts :meth:`WaveppMetrics.render` at ``GET /metrics``):

    metrics = process_metrics()              # the process's instruments: every run from now on feeds them
    body, content_type = metrics.render()    # Prometheus exposition text of everything recorded so far
    port = metrics.serve(9464)               # or a standalone endpoint (``--metrics-port``)

Exact, whatever the span sampler decides: every *recorded* span of a run reaches
:class:`MetricsSpanProcessor` as it ends (the sampler only decides what is exported), so each step,
admission round and request is counted once, on the runtime's own clock (virtual time on the sim).
Idle seconds by cause come from ``runtime/figures/idle_causes.py``: when a bench's run ends (``record_idle``),
and on a server at every scrape as they settle (``runtime.figures.idle_causes.LiveIdle``); queue
depths and KV blocks from the loop's status snapshots (``observe_status``).
"""

from __future__ import annotations

import os
import threading
from collections import deque
from collections.abc import Iterable, Mapping
from http.server import ThreadingHTTPServer
from typing import Any

from opentelemetry.context import Context
from opentelemetry.exporter.prometheus import PrometheusMetricReader
from opentelemetry.metrics import CallbackOptions, Observation
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor
from opentelemetry.trace import StatusCode
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.exposition import MetricsHandler

from wavepp.store.records import StatusSnapshot
from wavepp.telemetry import names as N
from wavepp.telemetry.reuse_split import token_split

# Bucket boundaries (seconds) per histogram, from what each measures on the sim and on a CPU torch run.
INTERVAL_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0)
ADMISSION_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
PART_BUCKETS = (1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0)
STEP_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
PREFILL_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 25.0, 50.0, 100.0, 300.0)
# vLLM's buckets of vllm:time_to_first_token_seconds, so the two servers' histograms compare bucket by bucket.
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
                40.0, 80.0, 160.0, 640.0, 2560.0)
GAIN_ERROR_BUCKETS = (-1.0, -0.5, -0.2, -0.1, -0.05, -0.02, 0.0, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0)
TOKEN_BUCKETS = (64, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536)

BUSY_WINDOW_S = 10.0                       # the sliding window of the busy-fraction gauge (run clock)

_STEPS = {N.MATERIALIZE: "materialize", N.EXECUTE: "execute", N.SEND: "send", N.STAGE_WAIT: "wait",
          N.COMPLETE: "complete"}
_PARTS = {N.HINT_LOOKUP: "lookup", N.LEASE: "lease", N.ESCROW: "escrow", N.ADMISSION_ROUND: "round"}


class WaveppMetrics:
    """The instruments of one meter provider and the Prometheus registry that exposes them."""

    def __init__(self, resource: Resource | None = None, busy_window_s: float = BUSY_WINDOW_S) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self._reader = PrometheusMetricReader(registry=self.registry, scope_info_enabled=False)
        self.provider = MeterProvider(metric_readers=[self._reader], resource=resource or Resource.create())
        m = self.provider.get_meter("wavepp")
        hist = m.create_histogram
        self.admission_interval = hist(N.M_ADMISSION_INTERVAL, "s", "Time between admission rounds that admitted",
                                       explicit_bucket_boundaries_advisory=INTERVAL_BUCKETS)
        self.admission_latency = hist(N.M_ADMISSION_LATENCY, "s", "Request arrival to admission",
                                      explicit_bucket_boundaries_advisory=ADMISSION_BUCKETS)
        self.admission_part = hist(N.M_ADMISSION_PART, "s", "Admission round and its lookup, lease, escrow parts",
                                   explicit_bucket_boundaries_advisory=PART_BUCKETS)
        self.stage_step = hist(N.M_STAGE_STEP, "s", "Stage step time by step kind",
                               explicit_bucket_boundaries_advisory=STEP_BUCKETS)
        self.prefill_latency = hist(N.M_PREFILL_LATENCY, "s", "Request arrival to its last chunk done",
                                    explicit_bucket_boundaries_advisory=PREFILL_BUCKETS)
        self.ttft = hist(N.M_TTFT, "s", "HTTP request accepted by the server to its first token ready (a server's "
                         "prefill requests; what a client's TTFT adds to it is the network and the client)",
                         explicit_bucket_boundaries_advisory=TTFT_BUCKETS)
        self.wave_tokens = hist(N.M_WAVE_TOKENS, "{token}", "Tokens per planned wave",
                                explicit_bucket_boundaries_advisory=TOKEN_BUCKETS)
        gauge = m.create_gauge
        self.waves_in_flight = gauge(N.M_WAVES_IN_FLIGHT, "{wave}", "Waves in flight when the last wave was planned")
        self.waves_ready = gauge(N.M_WAVES_READY, "{wave}", "Waves the planner had ready at the last plan")
        self.wave_budget = gauge(N.M_WAVE_BUDGET, "{token}", "Token budget of the last planned wave")
        self.wave_ring = gauge(N.M_WAVE_RING, "{wave}", "Waves allowed in flight")
        self.requests_waiting = gauge(N.M_REQUESTS_WAITING, "{request}", "Requests arrived, not admitted")
        self.requests_active = gauge(N.M_REQUESTS_ACTIVE, "{request}", "Requests admitted, not finished")
        self.kv_blocks = gauge(N.M_KV_BLOCKS, "{block}", "KV blocks per stage by state")
        self.kv_leases = gauge(N.M_KV_LEASES, "{request}", "Requests holding a lease on the stage")
        m.create_observable_gauge(N.M_STAGE_BUSY_FRACTION, [self._observe_busy], "1",
                                  f"Execute time per stage over the last {busy_window_s:g} s of the run clock")
        counter = m.create_counter
        self.stage_busy = counter(N.M_STAGE_BUSY, "s", "Execute time per stage")
        self.stage_idle = counter(N.M_STAGE_IDLE, "s", "Idle time per stage by cause (settled)")
        self.input_tokens = counter(N.M_INPUT_TOKENS, "{token}", "Prompt tokens of completed requests")
        self.computed_tokens = counter(N.M_COMPUTED_TOKENS, "{token}", "Tokens run through the model")
        self.reused_tokens = counter(N.M_REUSED_TOKENS, "{token}", "Prompt tokens served from the KV cache")
        self.shared_in_flight = counter(N.M_SHARED_IN_FLIGHT_TOKENS, "{token}",
                                        "Of the reused tokens, those a request still computing them gave")
        self.reused_from_cache = counter(N.M_REUSED_FROM_CACHE_TOKENS, "{token}",
                                         "Of the reused tokens, those a completed request had computed before "
                                         "(good-hit rate = this / reusable)")
        self.reusable_tokens = counter(N.M_REUSABLE_TOKENS, "{token}", "Prompt tokens a completed request had "
                                       "computed before the request arrived (good-hit's denominator)")
        self.requests = counter(N.M_REQUESTS, "{request}", "Requests finished by outcome")
        self.fallbacks = counter(N.M_FALLBACKS, "{fallback}", "Reuse boundaries lowered after admission")
        self.evictions = counter(N.M_EVICTIONS, "{block}", "Cached KV blocks evicted to prepare waves")
        self.waves = counter(N.M_WAVES, "{wave}", "Waves planned")
        self.spans_dropped = counter(N.M_SPANS_DROPPED, "{span}", "Spans an exporter dropped")
        self.store_failures = counter(N.M_STORE_FAILURES, "{call}", "Store calls that failed, by call and reason "
                                      "(unavailable, refused, error); an unavailable or refused call is retried")
        self.autopilot_decisions = counter(N.M_AUTOPILOT_DECISIONS, "{decision}", "Autopilot decisions, one a "
                                           "window, by action (hold, keep, advise, apply, rollback, ...)")
        self.autopilot_applies = counter(N.M_AUTOPILOT_APPLIES, "{apply}", "Knob settings the autopilot wrote")
        self.autopilot_rollbacks = counter(N.M_AUTOPILOT_ROLLBACKS, "{rollback}", "Autopilot applies taken back")
        self.autopilot_error = hist(N.M_AUTOPILOT_PREDICTION_ERROR, "1", "Observed minus predicted throughput gain "
                                    "of an autopilot apply, judged on the window after it",
                                    explicit_bucket_boundaries_advisory=GAIN_ERROR_BUCKETS)
        self.store_up = gauge(N.M_STORE_UP, "1", "1 while the store takes calls, 0 while they fail and are retried")
        self.busy_window_ns = int(busy_window_s * 1e9)
        self._busy: dict[tuple[str, int], deque[tuple[int, int]]] = {}
        self._busy_now: dict[str, int] = {}
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None

    # ---- exposition -------------------------------------------------------------------------------
    def render(self) -> tuple[bytes, str]:
        """Prometheus text exposition of every instrument, and its Content-Type."""
        return generate_latest(self.registry), CONTENT_TYPE_LATEST

    def serve(self, port: int, host: str = "127.0.0.1") -> int:
        """A standalone ``/metrics`` endpoint in a daemon thread; returns the bound port (0 picks one)."""
        handler = MetricsHandler.factory(self.registry)
        self._server = ThreadingHTTPServer((host, port), handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, name="wavepp-metrics", daemon=True).start()
        return int(self._server.server_address[1])

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        self.provider.shutdown()

    # ---- what a run feeds -------------------------------------------------------------------------
    def span_processor(self, policy: str, num_stages: int = 0) -> MetricsSpanProcessor:
        return MetricsSpanProcessor(self, policy, num_stages)

    def record_idle(self, policy: str, idle_causes_s: Iterable[Mapping[str, float]]) -> None:
        """A finished run's idle seconds per stage and cause (``RunFigures.idle_causes_s``)."""
        for stage, causes in enumerate(idle_causes_s):
            for cause, seconds in causes.items():
                if seconds > 0:
                    self.stage_idle.add(seconds, {"policy": policy, "stage": stage, "cause": cause})

    def observe_status(self, policy: str, snapshot: StatusSnapshot) -> None:
        """Queue depths and per-stage KV blocks from one of the loop's status snapshots."""
        labels = {"policy": policy}
        self.requests_waiting.set(snapshot.waiting, labels)
        self.requests_active.set(snapshot.active, labels)
        for st in snapshot.stages:
            stage: dict[str, str | int] = {"policy": policy, "stage": st.stage}
            for state, blocks in (("cached", st.cached), ("free", st.free), ("escrowed", st.escrowed)):
                self.kv_blocks.set(blocks, stage | {"state": state})
            self.kv_leases.set(st.leases, stage)

    def spans_dropped_by(self, exporter: str, n: int) -> None:
        """``n`` more spans ``exporter`` dropped (0: the series exists, at 0, before any drop)."""
        self.spans_dropped.add(n, {"exporter": exporter})

    # ---- the busy-fraction gauge ------------------------------------------------------------------
    def _reset_busy(self, policy: str) -> None:
        """A new run of this policy starts its own clock (the sim's starts at the same epoch again)."""
        with self._lock:
            for key in [k for k in self._busy if k[0] == policy]:
                del self._busy[key]
            self._busy_now.pop(policy, None)

    def _note_busy(self, policy: str, stage: int, t0: int, t1: int) -> None:
        with self._lock:
            window = self._busy.setdefault((policy, stage), deque())
            window.append((t0, t1))
            now = max(self._busy_now.get(policy, 0), t1)
            self._busy_now[policy] = now
            while window and window[0][1] < now - self.busy_window_ns:
                window.popleft()

    def _observe_busy(self, options: CallbackOptions) -> Iterable[Observation]:
        with self._lock:
            out = []
            for (policy, stage), window in self._busy.items():
                now = self._busy_now[policy]
                lo = now - self.busy_window_ns
                busy = sum(min(t1, now) - max(t0, lo) for t0, t1 in window if t1 > lo)
                out.append(Observation(busy / self.busy_window_ns, {"policy": policy, "stage": stage}))
            return out


class MetricsSpanProcessor(SpanProcessor):
    """Turns each recorded span of one run into metric points as it ends (on the loop's thread:
    a few dictionary lookups and instrument updates, no I/O).

    Points carry the policy that runs now: each wave plan names its policy (``wavepp.policy``), and
    a plan under another one (the ``policy`` knob changed at a wave boundary) moves every later
    point to that label; the old policy's busy fraction stops being reported."""

    def __init__(self, metrics: WaveppMetrics, policy: str, num_stages: int = 0) -> None:
        self.m = metrics
        self.policy = policy
        self.labels = {"policy": policy}
        self._last_admitting_round: int | None = None
        metrics._reset_busy(policy)
        # Counters of rare events are exported at 0 from the run's start (Prometheus convention: a
        # rate() or an alert on a series that does not exist yet sees nothing, not zero).
        metrics.fallbacks.add(0, self.labels)
        for stage in range(num_stages):
            metrics.evictions.add(0, {"policy": policy, "stage": stage})

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        return None

    def on_end(self, span: ReadableSpan) -> None:
        name, attrs = span.name, span.attributes or {}
        t0, t1 = span.start_time or 0, span.end_time or 0
        seconds = (t1 - t0) / 1e9
        m, labels = self.m, self.labels
        if name in _STEPS:
            stage = int(attrs.get(N.STAGE, 0))      # type: ignore[arg-type]
            m.stage_step.record(seconds, {"policy": self.policy, "stage": stage, "step": _STEPS[name]})
            if name == N.EXECUTE:
                m.stage_busy.add(seconds, {"policy": self.policy, "stage": stage})
                m._note_busy(self.policy, stage, t0, t1)
                if stage == 0:
                    m.computed_tokens.add(int(attrs.get(N.TOKENS, 0)), labels)     # type: ignore[arg-type]
            elif name == N.MATERIALIZE and attrs.get(N.EVICTIONS):
                m.evictions.add(int(attrs[N.EVICTIONS]), {"policy": self.policy, "stage": stage})  # type: ignore[arg-type]
        elif name in _PARTS:
            m.admission_part.record(seconds, {"policy": self.policy, "part": _PARTS[name]})
            if name == N.ADMISSION_ROUND and int(attrs.get(N.NUM_ADMITTED, 0)) > 0:   # type: ignore[arg-type]
                if self._last_admitting_round is not None:
                    m.admission_interval.record((t1 - self._last_admitting_round) / 1e9, labels)
                self._last_admitting_round = t1
        elif name == N.WAVE_PLAN:
            policy = attrs.get(N.POLICY)
            if isinstance(policy, str) and policy and policy != self.policy:
                self._switch(policy)
                labels = self.labels
            tokens = int(attrs.get(N.TOKENS, 0))       # type: ignore[arg-type]
            if tokens > 0:
                m.waves.add(1, labels)
                m.wave_tokens.record(tokens, labels)
                m.wave_budget.set(int(attrs.get(N.BUDGET, 0)), labels)               # type: ignore[arg-type]
                m.waves_in_flight.set(int(attrs.get(N.NUM_IN_FLIGHT, 0)), labels)   # type: ignore[arg-type]
                m.waves_ready.set(float(attrs.get(N.NUM_WAVES_READY, 0)), labels)   # type: ignore[arg-type]
                m.wave_ring.set(int(attrs.get(N.RING, 0)), labels)                  # type: ignore[arg-type]
        elif name == N.REQUEST:
            self._request(span, attrs, seconds)
        elif name == N.AUTOPILOT_DECISION:
            action = str(attrs.get(N.AUTOPILOT_ACTION, ""))
            m.autopilot_decisions.add(1, {"action": action})
            if action == "apply" and N.AUTOPILOT_VERSION in attrs:
                m.autopilot_applies.add(1)
            elif action == "rollback" and N.AUTOPILOT_VERSION in attrs:
                m.autopilot_rollbacks.add(1)
            observed, predicted = attrs.get(N.AUTOPILOT_OBSERVED_GAIN), attrs.get(N.AUTOPILOT_PREDICTED_GAIN)
            if isinstance(observed, float) and isinstance(predicted, float):
                m.autopilot_error.record(observed - predicted)
        elif name == N.HTTP_REQUEST and N.TTFT in attrs:
            m.ttft.record(float(attrs[N.TTFT]), {"policy": self.policy,           # type: ignore[arg-type]
                                                 "route": str(attrs.get(N.HTTP_ROUTE, ""))})

    def _switch(self, policy: str) -> None:
        self.m._reset_busy(self.policy)
        self.policy, self.labels = policy, {"policy": policy}
        self.m._reset_busy(policy)

    def _request(self, span: ReadableSpan, attrs: Mapping[str, Any], seconds: float) -> None:
        m, labels = self.m, self.labels
        admitted = [e.timestamp for e in span.events if e.name == N.EVENT_ADMITTED]
        if admitted and span.start_time is not None:
            m.admission_latency.record((admitted[-1] - span.start_time) / 1e9, labels)
        fallbacks = sum(1 for e in span.events if e.name == N.EVENT_FALLBACK)
        if fallbacks:
            m.fallbacks.add(fallbacks, labels)
        if span.status.status_code == StatusCode.ERROR:
            m.requests.add(1, {"policy": self.policy, "outcome": "failed"})
            return
        m.requests.add(1, {"policy": self.policy, "outcome": "completed"})
        m.prefill_latency.record(seconds, labels)
        reused = int(attrs.get(N.REUSED_TOKENS, 0))
        # the figures' own split, so good-hit and sharing in flight read the same
        inputs, good, reusable, in_flight = token_split(int(attrs.get(N.GEN_AI_INPUT_TOKENS, 0)), reused,
                                                        int(attrs.get(N.REUSABLE_TOKENS, 0)))
        m.input_tokens.add(inputs, labels)
        m.reused_tokens.add(reused, labels)
        m.reused_from_cache.add(good, labels)
        m.reusable_tokens.add(reusable, labels)
        m.shared_in_flight.add(in_flight, labels)

    def shutdown(self) -> None:
        return None

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


_PROCESS_METRICS: list[WaveppMetrics] = []
_PROCESS_LOCK = threading.Lock()


def process_metrics() -> WaveppMetrics:
    """The process's one set of instruments, created on first use. From then on every run's
    telemetry feeds it (a bench that never asks for metrics pays nothing)."""
    with _PROCESS_LOCK:
        if not _PROCESS_METRICS:
            # target_info names the service as the spans do (it said unknown_service:python); as
            # telemetry.setup.make_resource does, which cannot be imported here (setup imports this module)
            _PROCESS_METRICS.append(WaveppMetrics(Resource.create(
                {"service.name": os.environ.get("OTEL_SERVICE_NAME") or "wavepp"})))
        return _PROCESS_METRICS[0]


def process_metrics_if_any() -> WaveppMetrics | None:
    """The process's instruments when something asked for them (a server's ``/metrics``), else None."""
    return _PROCESS_METRICS[0] if _PROCESS_METRICS else None
