"""What every engine does the same way: open the run's store and set up its telemetry."""

from __future__ import annotations

from typing import Any

from wavepp.runtime.clock import now
from wavepp.runtime.engines.coordination import CoordinationCosts, CostedStore
from wavepp.runtime.runs.runfile import RunInfo
from wavepp.store.base import Store
from wavepp.store.memory import MemoryStore
from wavepp.store.resilient import ResilientStore
from wavepp.store.threaded import ThreadedStore
from wavepp.store.urls import StoreUrl
from wavepp.telemetry.setup import SIM_EPOCH_NS, Telemetry


async def open_run_store(url: StoreUrl, virtual: bool, costs: CoordinationCosts,
                         deadline_s: float | None = None) -> Store:
    """The run's store, emptied of earlier runs' state; the knobs stay (``wavepp bench --reset-store``
    clears them once, before the first run).

    Virtual time: every call costs the measured round trip on the virtual clock, and Redis I/O
    blocks the loop (no virtual time passes while a reply is on its way); an outage fails the run.
    Real time: calls are retried through outages and the hint index is rebuilt on reconnect; an
    outage longer than ``deadline_s`` fails the run (None: a long-running server waits it out).
    """
    inner: Store
    if url.kind == "memory":
        inner = MemoryStore()
        rtt = costs.store_rtt_s
    else:
        inner = await _redis_store(url, virtual)
        rtt = costs.redis_rtt_s
    await inner.clear_all(keep_knobs=True)
    if virtual:
        return CostedStore(inner, costs, rtt)
    return ResilientStore(inner, deadline_s=deadline_s)


async def _redis_store(url: StoreUrl, virtual: bool) -> Store:
    """The Redis store at ``url``: in a thread of its own on the virtual clock (its I/O blocks the loop)."""
    from wavepp.store.redis_store import RedisStore  # here: a run on the in-memory store never imports redis

    if virtual:
        return ThreadedStore(lambda: RedisStore.connect(url))
    return await RedisStore.connect(url)


def run_telemetry(url: StoreUrl, virtual: bool, run: RunInfo | None = None, keep: bool = True,
                  **options: Any) -> Telemetry:
    """Spans on the run's clock (virtual time counted from the run's real start, to the millisecond,
    so a trace viewer dates a virtual-time run when it ran), each carrying the run's id; where they
    go besides (the Redis span stream when the store is Redis, OTLP, a ``ring``, ``metrics``) is
    ``telemetry.setup``'s business (``options``: its ``ring``, ``config``, ``metrics``, ``num_stages``)."""
    epoch = (int(run.started * 1e3) * 1_000_000 if run else SIM_EPOCH_NS) if virtual else None
    return Telemetry(now, epoch, keep=keep, run_id=run.id if run else "",
                     run_label=run.label if run else "", policy=run.policy if run else "", stream=url, **options)


def store_source(url: StoreUrl) -> str:
    """The store part of a run's label and of ``wavepp serve``'s announce line (no password)."""
    return url.shown
