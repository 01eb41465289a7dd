"""``wavepp bench --url``: drive a running ``wavepp serve`` over HTTP and report what the in-process
bench reports, plus what its clients saw.

The prompts are the in-process bench's (the same seeded workload at the server's block size, its
already-seen prefixes sent first and not measured), so the two benches of one setting see the
same requests. Arrivals:

* closed loop (default): ``--concurrency`` clients, each sends its next request when its answer came;
* open loop, ``--rate R``: Poisson arrivals at R requests/s (seeded), whatever the answers;
* trace replay (``--workload trace:PATH``): the trace's timestamps, at most ``--concurrency`` outstanding
  (concurrency 0: no cap, as for the open loop).

The server's figures (throughput, pipeline efficiency, latencies, admission cadence) are computed
from the spans it finished during the measured window (``GET /v1/spans``), by the same code as the
in-process bench (:func:`runtime.figures.report.compute_figures`); the client adds its own latencies (send
to answer), its throughput, and the requests the server refused (429) or failed. The run's policy
is what those waves ran (their plan spans' ``wavepp.policy``), not the server's policy when the
bench started: a knob change waits for the loop's next wave.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import httpx

from wavepp.runtime.figures.report import RunFigures, compute_figures, percentile
from wavepp.runtime.request import Request
from wavepp.runtime.sources.traces import TraceWorkload
from wavepp.runtime.sources.workloads import Workload, WorkloadSpec, make_workload
from wavepp.telemetry import names as N

Progress = Callable[[str, int, int], None]
MAX_OPEN_CONNECTIONS = 256          # open loop: connections the client keeps at most
SPAN_PAGE_AFTER_ALL = 1 << 62          # ``after`` past any sequence number: only the ring's last number
POLICY_JOIN = "->"                      # a policy that changed during a run: its names in wave order


class LoadError(Exception):
    """The server cannot be benchmarked (unreachable, not a wavepp server, or it failed requests)."""


@dataclass(slots=True)
class ClientFigures:
    """What the clients saw: latency from send to answer, their own throughput, and refusals."""

    sent: int = 0
    answered: int = 0
    refused_429: int = 0
    failed: int = 0
    input_tokens: int = 0
    reused_tokens: int = 0                  # the server's answers: prefix tokens it found cached
    wall_s: float = 0.0
    latencies: list[float] = field(default_factory=list)
    overheads: list[float] = field(default_factory=list)     # client latency - the server's prefill_s
    first_error: str | None = None

    def as_dict(self) -> dict[str, Any]:
        lat, over = sorted(self.latencies), sorted(self.overheads)
        return {"sent": self.sent, "answered": self.answered, "refused_429": self.refused_429,
                "failed": self.failed, "wall_s": self.wall_s, "input_tokens": self.input_tokens,
                "reused_tokens": self.reused_tokens,
                "input_tokens_per_s": self.input_tokens / self.wall_s if self.wall_s and self.answered else None,
                "latency_p50_s": percentile(lat, 50), "latency_p95_s": percentile(lat, 95),
                "latency_p99_s": percentile(lat, 99), "http_overhead_p50_s": percentile(over, 50),
                "http_overhead_p95_s": percentile(over, 95)}


@dataclass(slots=True)
class UrlRun:
    figures: RunFigures                     # its policy: policy_label(policies)
    client: ClientFigures
    server: dict[str, Any]
    policies: list[str]                     # what the measured waves ran, in order (wave_policies)

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self.figures), "policies": self.policies, "url": self.server["url"],
                "client": self.client.as_dict(), "knobs": self.server.get("knobs")}


def wave_policies(spans: list[dict[str, Any]]) -> list[str]:
    """The policies the waves among ``spans`` (compact form) ran, in plan order, one name per stretch
    (``[a, b, a]`` for a change to ``b`` and back); a plan span that planned no wave has none."""
    plans = sorted((s for s in spans if s["n"] == N.WAVE_PLAN and N.POLICY in s["a"]), key=lambda s: s["t0"])
    names: list[str] = []
    for s in plans:
        if not names or names[-1] != s["a"][N.POLICY]:
            names.append(str(s["a"][N.POLICY]))
    return names


def policy_label(policies: list[str], server_policy: str) -> str:
    """A run's policy: the names its waves ran joined by POLICY_JOIN; the server's own when no wave
    was measured."""
    return POLICY_JOIN.join(policies) if policies else server_policy


class LoadGenerator:
    def __init__(self, url: str, spec: WorkloadSpec, requests: int | None, concurrency: int,
                 rate: float | None = None, prompt_tokens: int | None = None, seed: int = 0,
                 timeout_s: float = 600.0) -> None:
        self.url = url.rstrip("/")
        self.spec = spec
        self.requests = requests
        self.concurrency = concurrency
        self.rate = rate
        self.prompt_tokens = prompt_tokens
        self.seed = seed
        self.timeout_s = timeout_s

    async def server_info(self, client: httpx.AsyncClient) -> dict[str, Any]:
        """The server's deployment (stages, block size, vocabulary, policy) and its span ring's position."""
        try:
            r = await client.get("/v1/spans", params={"after": SPAN_PAGE_AFTER_ALL})
        except httpx.HTTPError as exc:
            raise LoadError(f"cannot reach {self.url}: {exc or type(exc).__name__}") from None
        if r.status_code != 200 or "last" not in r.text:
            raise LoadError(f"{self.url} is not a wavepp server (GET /v1/spans answered {r.status_code})")
        return dict(r.json())

    def workload(self, info: dict[str, Any]) -> Workload | TraceWorkload:
        from wavepp.runtime.sources.workloads import fit_prompt_tokens
        tokens = self.prompt_tokens
        if self.spec.kind != "trace":
            tokens = fit_prompt_tokens(self.spec, tokens, info["default_prompt_tokens"], info["max_prompt_tokens"],
                                       info["block_size"])
        return make_workload(self.spec, self.requests, tokens or 0, info["block_size"], info["vocab_size"], self.seed,
                             prefetch=True)

    async def run(self, progress: Progress | None = None) -> UrlRun:
        # Open loop and traces may have many requests out at once: the client keeps at most this many
        # connections (more wait in its pool), so the client's own sockets stay bounded.
        connections = self.concurrency or MAX_OPEN_CONNECTIONS        # 0: no cap (open loop, a trace's arrivals)
        limits = httpx.Limits(max_connections=connections, max_keepalive_connections=connections)
        async with httpx.AsyncClient(base_url=self.url, timeout=self.timeout_s, limits=limits) as client:
            info = await self.server_info(client)
            workload = self.workload(info)
            for tokens, _ in workload.primed_prompts():        # already seen: sent first, not measured
                await self._send(client, list(tokens), None, retry=True)
            at_start = await self.server_info(client)
            start_seq = at_start["last"]
            clients = ClientFigures()
            label = self.mode            # no policy: what the waves run is known once they have run
            total = workload.num_requests
            done = 0

            def finished() -> None:
                nonlocal done
                done += 1
                if progress is not None:
                    progress(label, done, total)

            start = time.monotonic()
            if isinstance(workload, TraceWorkload):
                await self._trace(client, workload, clients, finished)
            elif self.rate is not None:
                await self._open(client, workload, clients, finished)
            else:
                await self._closed(client, workload, clients, finished)
            clients.wall_s = time.monotonic() - start
            spans = await self._spans(client, start_seq)
        policies = wave_policies(spans)
        meta = {"policy": policy_label(policies, at_start["policy"]), "engine": info["engine"], "model": info["model"],
                "hardware": "http", "concurrency": self.concurrency, "workload": self.spec.name}
        figures = compute_figures(spans, info["pp"], meta)
        return UrlRun(figures, clients, {**info, "url": self.url}, policies)

    @property
    def mode(self) -> str:
        if self.spec.kind == "trace":
            return f"trace c<={self.concurrency}" if self.concurrency else "trace"
        return f"rate={self.rate:g}/s" if self.rate is not None else f"c={self.concurrency}"

    # ---- arrivals -------------------------------------------------------------------------------
    async def _closed(self, client: httpx.AsyncClient, workload: Workload | TraceWorkload, figures: ClientFigures,
                      finished: Callable[[], None]) -> None:
        async def worker() -> None:
            while not workload.exhausted:
                req = workload.next_request(0.0)
                await self._measure(client, req, figures, retry=True)
                finished()
        await asyncio.gather(*(worker() for _ in range(min(self.concurrency, workload.num_requests))))

    async def _open(self, client: httpx.AsyncClient, workload: Workload | TraceWorkload, figures: ClientFigures,
                    finished: Callable[[], None]) -> None:
        assert self.rate is not None
        rng = random.Random(self.seed)
        tasks = []
        next_at = time.monotonic()
        while not workload.exhausted:
            delay = next_at - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            req = workload.next_request(0.0)
            tasks.append(asyncio.create_task(self._measure(client, req, figures, retry=False, then=finished)))
            next_at += rng.expovariate(self.rate)
        await asyncio.gather(*tasks)

    async def _trace(self, client: httpx.AsyncClient, workload: TraceWorkload, figures: ClientFigures,
                     finished: Callable[[], None]) -> None:
        slots = asyncio.Semaphore(self.concurrency or workload.num_requests)      # 0: no cap
        tasks = []
        start = time.monotonic()

        async def one(req: Request) -> None:
            try:
                await self._measure(client, req, figures, retry=True, then=finished)
            finally:
                slots.release()
        while not workload.exhausted:
            delay = start + workload.arrival_offset(workload.issued) - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            await slots.acquire()
            tasks.append(asyncio.create_task(one(workload.next_request(0.0))))
        await asyncio.gather(*tasks)

    # ---- one request ----------------------------------------------------------------------------
    async def _measure(self, client: httpx.AsyncClient, req: Request, figures: ClientFigures, retry: bool,
                       then: Callable[[], None] | None = None) -> None:
        t0 = time.monotonic()
        figures.sent += 1
        status, body, refusals = await self._send(client, list(req.tokens), figures, retry)
        figures.refused_429 += refusals
        if status == 200:
            figures.answered += 1
            figures.input_tokens += req.num_tokens
            figures.reused_tokens += body["reused_tokens"]
            latency = time.monotonic() - t0
            figures.latencies.append(latency)
            figures.overheads.append(latency - body["timings"]["prefill_s"])
        elif status != 429:
            figures.failed += 1
            figures.first_error = figures.first_error or f"{status}: {str(body)[:200]}"
        if then is not None:
            then()

    async def _send(self, client: httpx.AsyncClient, tokens: list[int], figures: ClientFigures | None,
                    retry: bool) -> tuple[int, Any, int]:
        """POST one prompt; on 429, wait Retry-After and send again when ``retry`` (closed loop)."""
        refusals = 0
        while True:
            try:
                r = await client.post("/v1/prefill", json={"token_ids": tokens})
            except httpx.HTTPError as exc:
                return 0, f"{type(exc).__name__}: {exc}", refusals
            if r.status_code != 429:
                return r.status_code, r.json() if r.headers.get("content-type", "").startswith(
                    "application/json") else r.text, refusals
            refusals += 1
            if not retry:
                return 429, r.json(), refusals
            await asyncio.sleep(float(r.headers.get("retry-after", "1")))

    async def _spans(self, client: httpx.AsyncClient, after: int) -> list[dict[str, Any]]:
        r = await client.get("/v1/spans", params={"after": after})
        r.raise_for_status()
        return list(r.json()["spans"])
