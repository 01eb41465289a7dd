"""``wavepp bench``: run a workload under each policy and concurrency, side by side.

Every run gets fresh stages, a fresh store and the same seeded request sequence, so policies
see identical input. After each run the caches are checked: no lease or escrow left behind,
and every block free or cached.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from wavepp.runtime.control.knobs import Deployment, KnobError, Knobs, from_changes
from wavepp.runtime.engines.base import EngineParts
from wavepp.runtime.engines.common import store_source
from wavepp.runtime.figures.report import FigureAccumulator, RunFigures
from wavepp.runtime.guards.watchdog import DEFAULT_STALL_TIMEOUT_S, Stalled
from wavepp.runtime.kvcache.pools import CachePool
from wavepp.runtime.loop import LoopConfig, LoopResult, PipelineLoop
from wavepp.runtime.mechanisms.topology import Topology
from wavepp.runtime.policies import get_policy
from wavepp.runtime.runs.meta import describe_run
from wavepp.runtime.runs.runfile import RunInfo, SavedRun, load_label
from wavepp.runtime.sources.traces import TraceWorkload
from wavepp.runtime.sources.workloads import Workload, WorkloadSpec, make_workload
from wavepp.store.base import Store
from wavepp.store.urls import StoreUrl
from wavepp.telemetry.config import TelemetryConfig
from wavepp.telemetry.feed import SpanFeed
from wavepp.telemetry.metrics import WaveppMetrics
from wavepp.telemetry.setup import Telemetry, current_config


class Engine(Protocol):
    name: str
    pp: int
    block_size: int
    store_url: StoreUrl

    @property
    def vocab_size(self) -> int: ...
    @property
    def max_context(self) -> int: ...
    def default_prompt_tokens(self) -> int: ...
    def build(self, pool: CachePool = ...) -> EngineParts: ...
    def default_knobs(self) -> Knobs: ...
    async def open_store(self, deadline_s: float | None = None) -> Store: ...
    def telemetry(self, run: RunInfo | None = None, keep: bool = True, **options: Any) -> Telemetry: ...
    def runner(self) -> asyncio.Runner:
        """The event loop a run's coroutines run on (virtual time on the sim, the wall clock elsewhere)."""
        ...
    @property
    def virtual(self) -> bool: ...

    def close(self, orderly: bool = True) -> None: ...


#: a closed loop's concurrencies when none are given
DEFAULT_CONCURRENCIES = (8, 32, 128)
#: the concurrency of a run that has none: no client-side cap (:func:`runtime.runs.runfile.load_label`)
NO_CAP = 0


def run_concurrencies(given: Sequence[int] | None, workload: WorkloadSpec, rate: float | None = None) -> list[int]:
    """The concurrencies a bench runs, one run (per policy) each. Concurrency is a dimension of a
    closed loop (``given``, default :data:`DEFAULT_CONCURRENCIES`) and of a trace capped at the most
    requests outstanding (``given``); a trace's own arrivals without a cap run once (:data:`NO_CAP`),
    and so does an open loop at ``rate`` requests/s, where a concurrency would do nothing (ValueError)."""
    if rate is not None:
        if given is not None:
            raise ValueError("--concurrency: not with --rate (an open loop's requests arrive at the rate, "
                             "however many are outstanding)")
        return [NO_CAP]
    if given is not None:
        return list(given)
    return [NO_CAP] if workload.kind == "trace" else list(DEFAULT_CONCURRENCIES)


@dataclass(slots=True)
class BenchConfig:
    workload: WorkloadSpec
    concurrencies: Sequence[int]
    policies: Sequence[str]
    requests: int | None               # None: every row of a trace workload
    seed: int = 0
    prompt_tokens: int | None = None
    knobs: Knobs = field(default_factory=Knobs)
    model_name: str = ""
    hardware_name: str = ""
    stall_timeout_s: float = DEFAULT_STALL_TIMEOUT_S
    store_deadline_s: float | None = None   # real time: a store down this long ends the run (None: wait)
    telemetry: Sequence[str] = ("on",)      # span export per run, side by side: off, on, otlp (--telemetry)
    metrics: WaveppMetrics | None = None    # instruments to feed (None: the process's, with --metrics-port)
    check_invariants: bool = False          # runtime.guards.invariants after every wave and at the drain
    # Keep every span of each run (RunRecord.encoded: --save-run, --trace, a what-if's measurement);
    # off, the figures are folded in as the spans end and a run's memory does not grow with its
    # length by its spans.
    keep_spans: bool = True
    # What runs beside each run's loop (the autopilot: runtime.autopilot.runner.companion)
    companions: Sequence[CompanionFactory] = ()


@dataclass(slots=True)
class RunRecord:
    figures: RunFigures
    encoded: list[dict[str, Any]]      # every span in compact form, in end order (BenchConfig.keep_spans; else empty)
    loop: LoopResult
    parts: EngineParts

    run: RunInfo
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def label(self) -> str:
        """Short: the bench's own table and trace already say which bench this is."""
        mode = self.meta.get("telemetry", "on")
        return f"{self.figures.policy} {load_label(self.figures.concurrency)}" + (
            f" telemetry={mode}" if mode != "on" else "")

    def saved(self) -> SavedRun:
        changes = [{"t": t, "changes": c} for t, c in self.loop.knob_changes]
        return SavedRun(self.run.label, self.meta, self.figures.as_dict(), self.encoded, changes,
                        list(self.loop.status), self.run.id)


Progress = Callable[[str, int, int], None]    # (run label, finished requests, total)


class RunCompanion(Protocol):
    """Something that runs beside a run's loop (the autopilot): fed the run's spans as they end, its
    task started with the loop and cancelled when the loop ends, what it reports kept in the run's meta."""
    name: str

    def feed(self, spans: Sequence[dict[str, Any]]) -> None: ...
    async def run(self) -> None: ...
    def report(self) -> Any: ...


# (the loop, the run's meta, a call that hands over the spans the feed still batches, the clock is virtual)
CompanionFactory = Callable[[PipelineLoop, dict[str, Any], Callable[[], None], bool], RunCompanion]


def run_one(engine: Engine, cfg: BenchConfig, policy_name: str, concurrency: int,
            progress: Progress | None = None, telemetry: str = "on",
            workload: Workload | TraceWorkload | None = None) -> RunRecord:
    """One run; ``workload`` replaces the one ``cfg`` names (a what-if replay brings its own)."""
    knobs = cfg.knobs.replace(policy=policy_name)
    engine = laid_out(engine, get_policy(policy_name).topology)
    parts = engine.build(get_policy(policy_name).pool)
    run = RunInfo.new(policy_name, cfg.workload.name, concurrency, engine.name, store_source(engine.store_url))
    meta = describe_run(engine, run, knobs, [h.capacity for h in parts.handles], cfg.model_name, cfg.hardware_name)
    meta["telemetry"] = telemetry
    tel_cfg: TelemetryConfig = current_config().with_flags(telemetry)
    acc = FigureAccumulator(settle_stages=engine.pp)     # one pass, spans in the order they end
    consumers: list[Callable[[list[dict[str, Any]]], Any]] = [acc.add]
    encoded: list[dict[str, Any]] = []
    if cfg.keep_spans:
        consumers.append(encoded.extend)
    feed = SpanFeed(lambda spans: [consume(spans) for consume in consumers])
    # The run's spans are read through the feed alone (its figures, the kept list, a companion): spans
    # made for it, unless metrics or an exporter read them too (telemetry.setup).
    tel = engine.telemetry(run, keep=False, config=tel_cfg, metrics=cfg.metrics, feed=feed)
    if workload is None:
        workload = make_workload(cfg.workload, cfg.requests, cfg.prompt_tokens or engine.default_prompt_tokens(),
                                 engine.block_size, engine.vocab_size, cfg.seed, prefetch=engine.virtual)
    label = f"{policy_name} {load_label(concurrency)}"

    loops: list[PipelineLoop] = []
    companions: list[RunCompanion] = []

    async def main() -> LoopResult:
        parts.store = await engine.open_store(cfg.store_deadline_s)
        # The saved run's meta goes to the store when the loop starts (and again if the store comes
        # back empty): a viewer of a live store can replay the run.
        loop = PipelineLoop(parts, parts.store, knobs, workload, tel,
                            LoopConfig(concurrency, stall_timeout_s=cfg.stall_timeout_s, meta=meta,
                                       check_invariants=cfg.check_invariants))
        loops.append(loop)
        if progress is not None:
            loop.progress = lambda done, total: progress(label, done, total)
        companions.extend(start(loop, meta, feed.flush, engine.virtual) for start in cfg.companions)
        consumers.extend(c.feed for c in companions)
        beside = [asyncio.create_task(c.run(), name=c.name) for c in companions]
        try:
            result = await loop.run()
        finally:
            for task in beside:
                task.cancel()
            await parts.store.close()
        for h in parts.handles:
            await h.check()
        return result

    stalled: str | None = None
    try:
        with engine.runner() as runner:
            result = runner.run(main())
    except Stalled as exc:    # reported with its figures to the stall; the bench goes on with the next run
        if not loops:
            raise
        result, stalled = loops[0].result, str(exc)
    except BaseException:
        tel.shutdown()        # flush (or drop) the span stream now, not at exit after the error line
        raise
    feed.flush()
    figures = acc.figures(engine.pp, meta, stalled=stalled)
    meta["working_set_tokens"] = workload.working_set_tokens()     # beside meta["capacities"]: the pressure
    tel.shutdown()
    meta["spans"] = acc.num_spans
    for c in companions:
        meta[c.name] = c.report()
    meta["spans_dropped"] = tel.dropped()
    if tel.metrics is not None:
        tel.metrics.record_idle(policy_name, figures.idle_causes_s)
    return RunRecord(figures, encoded, result, parts, run, meta)


@dataclass(frozen=True, slots=True)
class PreparedStore:
    line: str                              # what was cleared and what was kept, in words
    knobs: dict[str, Any] | None = None    # the knobs kept (their values), which the runs start with


def prepare_store(url: StoreUrl, reset: bool) -> PreparedStore | None:
    """Before a bench on a shared store: clear what earlier runs left (hint index, leases, wave plans,
    status) and keep the deployment's knobs with their history - the runs then start with them
    (:func:`starting_knobs`) - or with ``reset`` clear those, the span stream and the run
    descriptions too. None for the in-process store, which starts empty. Raises StoreError when
    the store cannot be reached."""
    if url.kind != "redis":
        return None
    from wavepp.store.redis_store import RUN_META, RedisStore
    from wavepp.telemetry.redis_stream import runs_key, stream_key

    async def clear() -> tuple[int, Any]:
        store = await RedisStore.connect(url)
        try:
            n = await store.clear_all(keep_knobs=not reset)
            if reset:
                n += int(await store.client.delete(stream_key(url), runs_key(url), store.key(RUN_META)))
            return n, await store.knobs_get()
        finally:
            await store.close()
    n, record = asyncio.run(clear())
    where = f"store {store_source(url)}"
    if reset:
        return PreparedStore(f"{where}: --reset-store cleared {n} keys (run state, knobs, knob history, the span "
                             f"stream and the run descriptions)")
    kept = f"kept the knobs (version {record.version}) and their history" if record.version else "no knobs were set"
    return PreparedStore(f"{where}: cleared {n} keys left by earlier runs (hint index, leases, wave plans, status); "
                         f"{kept}; --reset-store clears them too", dict(record.values) if record.version else None)


def starting_knobs(kept: Mapping[str, Any], flags: Mapping[str, Any], ours: Knobs,
                   deployment: Deployment) -> tuple[Knobs, str]:
    """The knobs a bench on a store that kept its knobs starts with: the kept ones, with the knob
    flags given on the command line over them; the bench's own (``ours``) where the kept ones do not
    fit this deployment. With a line that says which (a bench never says it kept knobs it then
    overwrites)."""
    try:
        knobs = from_changes(kept, flags, deployment)
    except KnobError as exc:
        return ours, f"the kept knobs do not fit this deployment ({exc}): the runs start with the bench's own"
    given = f" (with {', '.join(f'{k}={v}' for k, v in flags.items())} from the command line)" if flags else ""
    return knobs, f"the runs start with the kept knobs{given}"


def iter_bench(engine: Engine, cfg: BenchConfig, progress: Progress | None = None) -> Iterator[RunRecord]:
    """Each (concurrency, policy, telemetry mode) run as it finishes (the CLI keeps what finished when a
    later run fails). The modes of one pair run back to back, so their throughputs compare."""
    for c in cfg.concurrencies:
        for p in cfg.policies:
            for mode in cfg.telemetry:
                yield run_one(engine, cfg, p, c, progress, mode)


def run_bench(engine: Engine, cfg: BenchConfig, progress: Progress | None = None) -> list[RunRecord]:
    return list(iter_bench(engine, cfg, progress))


def laid_out(engine: Engine, topology: Topology) -> Engine:
    """The engine a policy runs on: this one, or the sim laid out as the policy's topology says (a
    tensor/expert-parallel baseline: one stage over every GPU). ValueError on an engine that cannot."""
    relayout = getattr(engine, "laid_out", None)
    if relayout is not None:
        return relayout(topology)  # type: ignore[no-any-return]
    if topology.layout(2, 1) != (2, 1) or topology.comm != "custom":
        raise ValueError(f"topology {topology.name!r} runs on the sim engine only")
    return engine

