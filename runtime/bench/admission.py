"""``wavepp admission-bench``: how long admission takes, and how many store round trips it needs.

S stages are pre-populated with a shared document so most of every prompt is reusable; the hint
index is published to the store under test. Each request then arrives (its block hashes are
computed and timed separately, as *hashing*), and one admission round runs for it: hint lookup
in the store, lease and escrow on every stage. That round is the *admission latency*. Requests
stay admitted while up to ``window`` later ones arrive (as in a serving system, where in-flight
requests share the hot prefix), then are released. Requests arrive in batches of 250 whose
admissions then run back to back (one round per request).

Round trips are store calls made by the round; they must not grow with the prompt length.
"""

from __future__ import annotations

import random
import time
from collections import deque
from collections.abc import Callable, Coroutine
from dataclasses import asdict, dataclass
from typing import Any, TypeVar

from wavepp.runtime.admission import Admission
from wavepp.runtime.control.index_publisher import IndexPublisher
from wavepp.runtime.figures.report import percentile
from wavepp.runtime.kvcache.handle import StageHandle
from wavepp.runtime.kvcache.hashing import block_hashes, token_array
from wavepp.runtime.kvcache.priming import prime
from wavepp.runtime.kvcache.stage_cache import StageCache
from wavepp.runtime.mechanisms.reuse_lookup import HintIndex
from wavepp.runtime.request import Request
from wavepp.store.base import Store
from wavepp.store.open import open_store
from wavepp.store.urls import parse_store_url
from wavepp.store.wrapper import StoreWrapper
from wavepp.telemetry.setup import Telemetry

ARRIVAL_BATCH = 250
T = TypeVar("T")


@dataclass(slots=True)
class AdmissionBenchResult:
    store: str
    stages: int
    prompt_tokens: int
    block_size: int
    requests: int
    traced: bool                 # spans recorded during the round (else: the mechanism alone)
    latency_p50_s: float
    latency_p99_s: float
    hashing_p50_s: float
    round_trips_per_request: float
    reused_blocks_mean: float

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class CountingStore(StoreWrapper):
    """Counts the calls that reach the store (each is one round trip on a networked store)."""

    def __init__(self, inner: Store) -> None:
        super().__init__(inner)
        self.calls = 0

    async def _call(self, name: str, call: Callable[[], Coroutine[Any, Any, T]]) -> T:
        self.calls += 1
        return await call()


async def admission_bench(store_url: str, stages: int, prompt_tokens: int, block_size: int, requests: int,
                          seed: int = 0, window: int = 8, suffix_tokens: int | None = None,
                          trace: bool = False) -> AdmissionBenchResult:
    if stages < 1 or requests < 1 or block_size < 1 or prompt_tokens < 2 * block_size:
        raise ValueError("stages, requests and block size must be >= 1 and prompt tokens >= 2 blocks")
    url = parse_store_url(store_url)
    if url.kind == "redis" and "cluster=" not in store_url:
        store_url += ("&" if "?" in store_url else "?") + "cluster=admission-bench"
    inner = await open_store(store_url)
    try:
        await inner.clear_all()
        rng = random.Random(seed)
        suffix = suffix_tokens if suffix_tokens is not None else min(4 * block_size, prompt_tokens // 8)
        doc = token_array([rng.randrange(32000) for _ in range(prompt_tokens - suffix)])
        doc_hashes = block_hashes(doc, block_size)
        need = 2 * (-(-prompt_tokens // block_size)) + (window + 2) * (-(-suffix // block_size) + 1)
        handles = [StageHandle(StageCache(s, need, block_size)) for s in range(stages)]
        for h in handles:
            assert prime(h.cache, "doc", doc_hashes, len(doc))
        await IndexPublisher(handles, inner).flush()

        store = CountingStore(inner)
        admission = Admission(handles, range(stages), store, block_size,
                              Telemetry(time.monotonic, 0, enabled=trace), HintIndex())
        latencies, hashing, reused = [], [], []
        live: deque[str] = deque()
        for first in range(0, requests, ARRIVAL_BATCH):
            # Arrivals of a batch first (hashing timed per request), then their admissions back to
            # back, so the admission figure is not the cache misses left behind by hashing.
            batch = []
            for i in range(first, min(first + ARRIVAL_BATCH, requests)):
                tokens = doc + token_array([rng.randrange(32000) for _ in range(suffix)])
                t0 = time.perf_counter()
                hashes = block_hashes(tokens, block_size)
                hashing.append(time.perf_counter() - t0)
                batch.append(Request(f"q{i}", tokens, 0.0, hashes))
            for req in batch:
                t0 = time.perf_counter()
                result = await admission.round([req])
                latencies.append(time.perf_counter() - t0)
                if not result.admitted:
                    raise RuntimeError(f"request {req.id} could not be admitted (stages too small)")
                reused.append(result.admitted[0].reuse_blocks)
                live.append(req.id)
                if len(live) > window:
                    old = live.popleft()
                    for h in handles:
                        await h.release([old], remote=False)
        for h in handles:
            await h.release(list(live), remote=False)
            h.cache.check()
        return AdmissionBenchResult(
            store=url.kind, stages=stages, prompt_tokens=prompt_tokens, block_size=block_size, requests=requests,
            traced=trace,
            latency_p50_s=_measured(latencies, 50), latency_p99_s=_measured(latencies, 99),
            hashing_p50_s=_measured(hashing, 50),
            round_trips_per_request=store.calls / requests,
            reused_blocks_mean=sum(reused) / len(reused),
        )
    finally:
        await inner.close()


def _measured(values: list[float], q: float) -> float:
    """A percentile of samples that exist (every request is measured, and there is at least one)."""
    value = percentile(values, q)
    assert value is not None
    return value
