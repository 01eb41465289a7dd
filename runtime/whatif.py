"""What-if: replay a run's recent arrivals in the simulator under two knob sets (preview; a small
grid of them: :mod:`runtime.whatif_suggest`), before a knob change is applied.

The replay runs the SAME loop (:class:`runtime.loop.PipelineLoop`, through
:func:`runtime.bench.run_one`) on the sim engine in virtual time, with the cost model of the
engine that ran: the sim's own (model, hardware, tables or roofline), or for the torch engine a
``wavepp calibrate`` profile. Without one, a torch run cannot be previewed, and says so.

What a run's spans keep of a request is its arrival, its prompt length and how much of its prefix
had been computed before it arrived (``reusable``); the token ids are gone. The replay rebuilds
prompts with the same shape (:func:`rebuild_trace`): a request whose first ``r`` blocks were
reusable shares them with earlier requests that had the same reusable prefix (the same document,
``reuse90``'s groups), else with an earlier request of exactly ``r`` full blocks (the previous turn
of a conversation), else with a prefix primed before the replay starts (computed before the
window, as the workload's primed prefixes are); everything after ``r`` is new. Arrivals replay
through :class:`runtime.traces.TraceWorkload`: at their own offsets for a trace (open loop), or -
for a closed-loop run, whose arrivals were paced by its own completions - as a closed loop of the
run's concurrency (``open_loop=False``: the loop's own closed-loop path, the next request drawn as
one finishes), so a faster setting can show its gain. The path matters in real time: replayed
through the open-loop arrival task instead, a ring=2 run's 8 requests a wave became 5.6 (the next
wave was planned before the round that admitted the returning requests), 16 % off in throughput.

What a closed-loop replay cannot know is how the run's clients were grouped: they return in the
groups their requests finished in, so waves keep the grouping they start with, and the replay starts
from all clients at once. Measured (real time, 400 arrivals): a sim ring=8 window replayed from that
burst formed 68 waves where the run formed 72; opened instead at the window's first arrival times it
formed 116 (each arrival into an idle pipeline is a wave of its own), so the burst stays. A torch
window recorded at ring=1 replayed at ring=4 gives efficiency 0.90-0.97 from the burst (0.99 opened
at the arrival times) where the runtime, switched to ring=4 mid-run, measured 0.94-0.99 in five
runs: the grouping is a spread the run itself has, not a level the replay can fit.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from wavepp.runtime.bench import BenchConfig, RunRecord, run_one
from wavepp.runtime.engines.sim.clock import measure_wake
from wavepp.runtime.engines.sim.engine import SimEngine
from wavepp.runtime.knobs import Knobs
from wavepp.runtime.report import RunFigures, compute_figures
from wavepp.runtime.traces import Trace, TraceRow, TraceWorkload
from wavepp.runtime.whatif_calibrate import describe as describe_fit
from wavepp.runtime.whatif_calibrate import fit_cpu_scale, fit_steps
from wavepp.runtime.workloads import WorkloadSpec
from wavepp.telemetry import names as N

MIN_ARRIVALS = 16            # fewer requests than this say too little about a setting
# A replay starts with an empty pipeline and ends by draining it; the run it replays was full at both
# ends of the window. So both are measured alike, on the requests that arrived between the first and
# the last few (2 x the concurrency, at most an eighth of the arrivals, at each end) and the steps
# from the first of those arrivals until the last of those requests finished (observed_since).
MEASURE_MARGIN_PER_CLIENT = 2
MEASURE_MARGIN_FRACTION = 8
MAX_ARRIVALS = 400           # the most recent ones are replayed (a preview takes seconds, not minutes)
DEFAULT_WINDOW_S = 60.0
DEFAULT_TIME_LIMIT_S = 60.0

Span = dict[str, Any]
Progress = Callable[[float, str], None]       # (fraction done, what runs now)


class WhatIfError(ValueError):
    """A preview that cannot run, with the reason in one line (no calibration, too few arrivals …)."""


class TimeLimit(WhatIfError):
    """The replay ran past its time limit."""


# ---- what is replayed -----------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Arrival:
    offset_s: float               # after the window's first arrival
    tokens: int                   # prompt length
    reusable_tokens: int          # prefix computed before it arrived (whole blocks)
    done_s: float | None          # when it finished in the observed run (None: failed)


@dataclass(frozen=True, slots=True)
class Replay:
    arrivals: tuple[Arrival, ...]
    concurrency: int              # the most requests outstanding (a closed loop's c)
    open_loop: bool               # True: at the arrivals' own offsets (a trace); False: as fast as c allows
    note: str = ""                # which arrivals: "the 212 requests of the last 60 s"
    start_ns: int = 0             # the first and the last one's arrival on the run's span clock
    end_ns: int = 0
    observed: tuple[Span, ...] = ()   # the run's spans from the first arrival on (a real-time replay's fit)

    @property
    def margin(self) -> int:
        """Arrivals left out of the figures at each end of the replay (:func:`measured_figures`)."""
        return min(MEASURE_MARGIN_PER_CLIENT * self.concurrency, len(self.arrivals) // MEASURE_MARGIN_FRACTION)

    @property
    def measured_ns(self) -> tuple[int, int]:
        """The arrivals the figures count, on the run's span clock: from the one after the first
        ``margin`` to the one before the last ``margin``."""
        if not self.arrivals:
            return self.start_ns, self.end_ns
        return measured_bounds([self.start_ns + round(a.offset_s * 1e9) for a in self.arrivals], self.margin)


def measured_bounds(arrived_ns: Sequence[int], margin: int) -> tuple[int, int]:
    """The first and the last arrival counted of these (sorted): ``margin`` in from each end, and
    past every arrival at the very first one's time (a closed loop's opening burst is all fill)."""
    last = arrived_ns[max(len(arrived_ns) - 1 - margin, 0)]
    later = [t for t in arrived_ns[margin:] if t > arrived_ns[0]]
    return (later[0] if later and later[0] <= last else arrived_ns[min(margin, len(arrived_ns) - 1)]), last


def arrivals_from_spans(spans: Sequence[Span], window_s: float | None = DEFAULT_WINDOW_S,
                        limit: int = MAX_ARRIVALS) -> tuple[list[Arrival], str, int]:
    """The requests that arrived in the last ``window_s`` seconds of the spans (None: all), the most
    recent ``limit`` of them, a note saying which, and the first one's arrival (ns). Requests still
    in flight have no span yet."""
    reqs = sorted((s for s in spans if s["n"] == N.REQUEST), key=lambda s: s["t0"])
    if not reqs:
        return [], "no request has finished yet", 0
    end = max(s["t1"] for s in reqs)
    if window_s is not None:
        reqs = [s for s in reqs if s["t0"] >= end - window_s * 1e9]
    note = f"the {len(reqs)} requests of the last {window_s:g} s" if window_s is not None else \
        f"all {len(reqs)} requests"
    if len(reqs) > limit:
        reqs = reqs[-limit:]
        note = f"the {limit} most recent of {note.removeprefix('the ').removeprefix('all ')}"
    origin = reqs[0]["t0"] if reqs else 0
    out = [Arrival((s["t0"] - origin) / 1e9, int(s["a"].get(N.GEN_AI_INPUT_TOKENS, 0)),
                   int(s["a"].get(N.REUSABLE_TOKENS, 0)), None if "err" in s else (s["t1"] - origin) / 1e9)
           for s in reqs]
    return [a for a in out if a.tokens > 0], note, origin


def max_outstanding(arrivals: Sequence[Arrival]) -> int:
    """The most requests in flight at once (a closed loop's concurrency, when the run does not say)."""
    events = sorted([(a.offset_s, 1) for a in arrivals] + [(a.done_s, -1) for a in arrivals if a.done_s is not None])
    most = current = 0
    for _, step in events:
        current += step
        most = max(most, current)
    return max(most, 1)


def rebuild_trace(arrivals: Sequence[Arrival], block_size: int, open_loop: bool) -> Trace:
    """Prompts of the arrivals' lengths and reusable prefixes, as a trace of block ids (module doc)."""
    next_id = 0

    def fresh(n: int) -> tuple[int, ...]:
        nonlocal next_id
        next_id += n
        return tuple(range(next_id - n, next_id))

    by_reusable: dict[int, tuple[int, ...]] = {}          # reusable blocks -> the shared prefix
    finished: dict[int, tuple[int, ...]] = {}             # full blocks -> a finished request's first blocks
    pending: list[tuple[float, int, tuple[int, ...]]] = []   # (done, full blocks, ids) not yet finished
    primed: list[tuple[int, ...]] = []
    rows = []
    for i, a in enumerate(arrivals):
        for _, full, ids in sorted(p for p in pending if p[0] <= a.offset_s):   # the latest wins
            finished[full] = ids[:full]
        pending = [p for p in pending if p[0] > a.offset_s]
        blocks = -(-a.tokens // block_size)
        r = min(a.reusable_tokens // block_size, (a.tokens - 1) // block_size)
        prefix: tuple[int, ...] = ()
        if r > 0:
            prefix = by_reusable.get(r) or finished.get(r) or ()
            if not prefix:
                prefix = fresh(r)
                primed.append(prefix)
            by_reusable[r] = prefix
        ids = prefix + fresh(blocks - len(prefix))
        if a.done_s is not None:
            pending.append((a.done_s, a.tokens // block_size, ids))
        rows.append(TraceRow(i + 1, a.offset_s if open_loop else 0.0, a.tokens, ids))
    return Trace("(replay)", rows, block_tokens=block_size, primed=tuple(primed))


# ---- the simulator that replays -------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class SimSpec:
    """How to build the sim that stands in for the engine that ran."""

    engine: str                   # the engine observed: sim or torch
    model: str
    hardware: str
    pp: int
    block_size: int
    capacities: tuple[int, ...]
    gpus_per_stage: int | None = None
    cost_model: str = "auto"
    cost_profile: str | None = None
    perf_dir: str | None = None
    host_work_scale: float = 1.0
    time_scale: float = 1.0       # a real-time sim's stretch of its modelled step times
    # How the replay's time passes: "virtual" (the run was the virtual-time sim: the same model) or
    # "cpu" (the run paid its loop's work in real time: the replay pays the same code's CPU time,
    # times cpu_scale; runtime.whatif_calibrate fits cpu_scale and step_fit to the run's spans).
    clock: str = "virtual"
    cpu_scale: float = 1.0
    wake_s: float = 0.0           # how late a real loop on this machine wakes from an idle wait (measured)
    step_fit: tuple[tuple[float, float], ...] | None = None   # per stage: (scale, offset s) of the step time (torch)
    repeats: int = 1              # replays per setting, averaged (a CPU clock's replay is not deterministic)
    fit: str = ""                 # what the calibration measured, in words

    def build(self) -> SimEngine:
        """The sim that replays (the time scale still stretches its modelled step times)."""
        return SimEngine(self.model, self.hardware, self.pp, self.block_size, list(self.capacities),
                         self.gpus_per_stage, cost_profile=self.cost_profile,
                         cost_model="auto" if self.cost_profile else self.cost_model, perf_dir=self.perf_dir,
                         host_work_scale=self.host_work_scale, time_scale=self.time_scale, clock=self.clock,
                         cpu_scale=self.cpu_scale, wake_s=self.wake_s,
                         step_fit=self.step_fit)

    @property
    def describe(self) -> str:
        what = f"sim calibrated on the torch engine ({self.cost_profile})" if self.cost_profile else \
            f"sim: {self.model} on {self.hardware}, PP{self.pp}"
        if self.clock == "cpu":
            fit = f" ({self.fit})" if self.fit else ""
            what += f", the loop's CPU time charged{fit}, median of {self.repeats} replays"
        return what


NO_CALIBRATION = ("no calibration: a torch run is previewed in the sim calibrated to it; make a profile with "
                  "`wavepp calibrate --engine torch --model {model} --pp {pp} --out FILE` and give it")


def sim_spec(meta: Mapping[str, Any], cost_profile: str | None = None) -> SimSpec:
    """The sim for a run described by ``meta`` (engine, model, hardware, pp, block_size, capacities;
    a sim run's ``sim`` arguments). A torch run needs ``cost_profile``; WhatIfError says why not."""
    from wavepp.runtime.engines.calibrate import load_profile
    engine, pp, block = str(meta.get("engine", "")), int(meta.get("pp") or 0), int(meta.get("block_size") or 64)
    capacities = tuple(int(c) for c in meta.get("capacities") or ())
    if pp < 1 or len(capacities) != pp:
        raise WhatIfError("the run does not say its stages and their KV capacities: it cannot be replayed")
    sim_args = dict(meta.get("sim") or {})
    profile_path = cost_profile or sim_args.get("cost_profile")
    if engine == "torch" and not profile_path:
        raise WhatIfError(NO_CALIBRATION.format(model=meta.get("model") or "MODEL", pp=pp))
    if engine not in ("sim", "torch"):
        raise WhatIfError(f"cannot replay a run of engine {engine!r} (sim or torch)")
    if profile_path:
        try:
            profile = load_profile(profile_path)
        except ValueError as exc:
            raise WhatIfError(str(exc)) from None
        if profile["pp"] != pp:
            raise WhatIfError(f"the cost profile {profile_path} was measured with pp={profile['pp']}; the run has {pp}")
        if engine == "torch" and meta.get("model") and profile.get("model") != meta.get("model"):
            raise WhatIfError(f"the cost profile {profile_path} was measured on {profile.get('model')}; "
                              f"the run is {meta.get('model')}")
        return SimSpec(engine, str(profile.get("model", "")), "", pp, block, capacities, cost_profile=profile_path,
                       time_scale=float(sim_args.get("time_scale", 1.0)), **_clock(engine, sim_args))
    model, hardware = sim_args.get("model") or meta.get("model"), sim_args.get("hardware") or meta.get("hardware")
    if not model or not hardware:
        raise WhatIfError("the run does not say which model and hardware the sim ran: it cannot be replayed")
    return SimSpec(engine, str(model), str(hardware), pp, block, capacities, sim_args.get("gpus_per_stage"),
                   sim_args.get("cost_model") or "auto", None, sim_args.get("perf_dir"),
                   float(sim_args.get("host_work_scale", 1.0)), float(sim_args.get("time_scale", 1.0)),
                   **_clock(engine, sim_args))


CPU_CLOCK_REPEATS = 3     # a CPU-clock replay varies run to run (as the runtime does): the median of this many


def _clock(engine: str, sim_args: Mapping[str, Any]) -> dict[str, Any]:
    """A run on the wall clock (the torch engine, a real-time sim) is replayed on the CPU clock; the
    virtual-time sim by itself."""
    realtime = engine == "torch" or sim_args.get("clock") == "wall" or bool(sim_args.get("realtime"))
    return {"clock": "cpu", "repeats": CPU_CLOCK_REPEATS} if realtime else {}


# ---- predictions ----------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Prediction:
    knobs: dict[str, Any]
    figures: RunFigures           # the mean over the replays; anchored on the run where it says (raw)
    seconds: float                # wall time the replays took
    throughputs: tuple[float, ...] = ()   # input tok/s of each replay (their spread: how sure the mean is)
    raw: RunFigures | None = None  # the replays' own mean before anchoring (None: not anchored)

    @property
    def replayed(self) -> RunFigures:
        """What the replays themselves gave."""
        return self.raw if self.raw is not None else self.figures

    def idle_shares(self) -> dict[str, float]:
        """Idle time by cause, summed over stages, as a share of P x makespan."""
        return idle_shares(self.figures)


def idle_shares(figures: RunFigures) -> dict[str, float]:
    span = (figures.makespan_s or 0.0) * figures.pp
    out: dict[str, float] = {}
    for stage in figures.idle_causes_s:
        for cause, s in stage.items():
            out[cause] = out.get(cause, 0.0) + s
    return {c: s / span for c, s in sorted(out.items(), key=lambda kv: -kv[1]) if span > 0 and s > 0}


@dataclass(frozen=True, slots=True)
class PreviewResult:
    current: Prediction
    proposed: Prediction
    changes: dict[str, Any]
    replay_note: str
    sim: str

    @property
    def throughput_gain(self) -> float | None:
        return gain(self.current.figures.input_tokens_per_s, self.proposed.figures.input_tokens_per_s)


def gain(before: float | None, after: float | None) -> float | None:
    return after / before - 1 if before and after is not None else None


class Deadline:
    """Progress of several replays, and the time limit over all of them (checked per finished request)."""

    def __init__(self, time_limit_s: float, runs: int, progress: Progress | None) -> None:
        self.end = time.monotonic() + time_limit_s
        self.limit = time_limit_s
        self.runs = runs
        self.index = 0
        self.progress = progress

    def __call__(self, label: str, done: int, total: int) -> None:
        if time.monotonic() > self.end:
            raise TimeLimit(f"the replay ran past its time limit of {self.limit:g} s")
        if self.progress is not None:
            self.progress(min(1.0, (self.index + done / max(total, 1)) / self.runs), label)


def predict(replay: Replay, spec: SimSpec, knobs: Knobs, deadline: Deadline, label: str) -> Prediction:
    """``spec.repeats`` replays of ``replay`` under ``knobs`` (the same loop, the sim), their figures averaged."""
    return predict_each(replay, spec, [(knobs, label)], deadline)[0]


def predict_each(replay: Replay, spec: SimSpec, settings: Sequence[tuple[Knobs, str]],
                 deadline: Deadline) -> list[Prediction]:
    """:func:`predict` for each (knobs, label), their replays taking turns (a setting's first, the
    next one's first, …), so a machine whose load drifts meanwhile weighs on every setting alike."""
    runs: list[list[RunRecord]] = [[] for _ in settings]
    took = [0.0] * len(settings)
    for i in range(1, spec.repeats + 1):
        for n, (knobs, label) in enumerate(settings):
            started = time.monotonic()
            runs[n].append(replay_once(replay, spec, knobs, deadline,
                                       label if spec.repeats == 1 else f"{label} ({i}/{spec.repeats})"))
            took[n] += time.monotonic() - started
    measured = [[measured_figures(r, replay, spec.pp) for r in done] for done in runs]
    return [Prediction(knobs.as_dict(), median_run(figures), seconds,
                       tuple(f.input_tokens_per_s or 0.0 for f in figures))
            for (knobs, _), figures, seconds in zip(settings, measured, took, strict=True)]


def measured_figures(record: RunRecord, replay: Replay, num_stages: int) -> RunFigures:
    """A replay's figures over the arrivals a run's are measured on (``Replay.margin``): not its fill
    at the start nor its drain at the end, which the run it replays did not have."""
    arrived = sorted(s["t0"] for s in record.encoded if s["n"] == N.REQUEST)
    if len(arrived) <= 2 * replay.margin:
        return record.figures
    first, last = measured_bounds(arrived, replay.margin)
    return observed_since(record.encoded, first, num_stages, last, record.meta)


def anchored(predictions: Sequence[Prediction], current: RunFigures, observed: RunFigures | None) -> list[Prediction]:
    """Each prediction moved by what separates the replay of the current knobs (``current``) from
    what the run did over the same arrivals (``observed``): rates, makespan and prefill latencies by
    the ratio. The replays' speed is the part a preview knows least (the machine's load when it runs
    against when the run ran, prompts rebuilt from their shape); their differences are what it is
    for. Pipeline efficiency stays as replayed: a ratio of busy to elapsed time, a machine uniformly
    slower leaves it as it is, and an offset of the replay's (measured: mostly the preview competing
    with the runtime for the cores) did not carry over to other settings (it moved a ring=1 change's
    efficiency 0.05-0.07 off, where the replays alone were within 0.005). The same when ``observed``
    says too little."""
    if observed is None or observed.completed < MIN_ARRIVALS or not current.input_tokens_per_s \
            or not observed.input_tokens_per_s:
        return list(predictions)
    rate = observed.input_tokens_per_s / current.input_tokens_per_s

    def by_ratio(field: str, value: float | None) -> float | None:
        o, c = getattr(observed, field), getattr(current, field)
        return value * o / c if value is not None and o is not None and c else value

    def move(f: RunFigures) -> RunFigures:
        return dataclasses.replace(
            f, input_tokens_per_s=by_ratio("input_tokens_per_s", f.input_tokens_per_s),
            computed_tokens_per_s=f.computed_tokens_per_s * rate if f.computed_tokens_per_s is not None else None,
            makespan_s=f.makespan_s / rate if f.makespan_s is not None else None,
            prefill_latency_p50_s=by_ratio("prefill_latency_p50_s", f.prefill_latency_p50_s),
            prefill_latency_p95_s=by_ratio("prefill_latency_p95_s", f.prefill_latency_p95_s),
            prefill_latency_p99_s=by_ratio("prefill_latency_p99_s", f.prefill_latency_p99_s))

    return [dataclasses.replace(p, figures=move(p.replayed), raw=p.replayed) for p in predictions]


def replay_once(replay: Replay, spec: SimSpec, knobs: Knobs, deadline: Deadline, label: str) -> RunRecord:
    """One replay of ``replay`` under ``knobs``: its figures and spans."""
    engine = spec.build()
    trace = rebuild_trace(replay.arrivals, spec.block_size, replay.open_loop)
    workload = TraceWorkload(trace, spec.block_size, engine.vocab_size, open_loop=replay.open_loop)
    too_long = [a.tokens for a in replay.arrivals if a.tokens > engine.max_context]
    if too_long:
        raise WhatIfError(f"{len(too_long)} prompt(s) of up to {max(too_long)} tokens are longer than the "
                          f"simulated model's context ({engine.max_context})")
    cfg = BenchConfig(WorkloadSpec("trace", path="(replay)"), [replay.concurrency], [knobs.policy], None,
                      knobs=knobs)
    try:
        # telemetry "off": the replay's spans stay in the process (figures only), never exported
        record = run_one(engine, cfg, knobs.policy, replay.concurrency,
                         lambda _label, done, total: deadline(label, done, total), "off", workload)
    finally:
        engine.close()
    deadline.index += 1
    return record


def median_run(runs: Sequence[RunFigures]) -> RunFigures:
    """The figures of the replay whose input throughput is the median (the lower one of the middle
    two for an even count): one replay's figures, consistent with each other, and one replay that
    stalled or ran away does not move them."""
    ranked = sorted(runs, key=lambda f: f.input_tokens_per_s or 0.0)
    return ranked[(len(ranked) - 1) // 2]


def observed_over(spans: Sequence[Span], replay: Replay, num_stages: int) -> RunFigures:
    """What the run itself did over the replayed arrivals (the replay of its current knobs is checked
    against it)."""
    first, last = replay.measured_ns
    return observed_since(spans, first, num_stages, last)


def check_replay(replay: Replay) -> None:
    if len(replay.arrivals) < MIN_ARRIVALS:
        raise WhatIfError(f"too few arrivals to replay: {replay.note or f'{len(replay.arrivals)} requests'}; "
                          f"a preview needs at least {MIN_ARRIVALS} (widen the window or wait for more)")


def calibrated(replay: Replay, spec: SimSpec) -> SimSpec:
    """A real-time run's replay fitted to the run's spans over the window (:mod:`runtime.whatif_calibrate`);
    the virtual-time sim's replay is the sim itself: nothing to fit."""
    if spec.clock != "cpu" or not replay.observed:
        return spec
    steps = None
    if spec.engine == "torch":
        engine = spec.build()
        try:
            steps = fit_steps(replay.observed, engine.cost_model, spec.pp, spec.time_scale)
        finally:
            engine.close()
    # The run's pure-CPU spans say how much of a core its loop had (wall / CPU time); it is shown, not
    # charged: the replay charges its thread's CPU time as it is (module doc of whatif_calibrate).
    loop = fit_cpu_scale(replay.observed)
    wake = measure_wake()
    return dataclasses.replace(spec, cpu_scale=1.0, wake_s=wake, step_fit=steps, fit=describe_fit(loop, steps, wake))


def preview(replay: Replay, spec: SimSpec, current: Knobs, proposed: Knobs,
            time_limit_s: float = DEFAULT_TIME_LIMIT_S, progress: Progress | None = None) -> PreviewResult:
    """The replay under the current and the proposed knobs, side by side."""
    check_replay(replay)
    deadline = Deadline(time_limit_s, 2 * spec.repeats, progress)
    spec = calibrated(replay, spec)
    now, then = predict_each(replay, spec, [(current, "current knobs"), (proposed, "proposed knobs")], deadline)
    now, then = anchored([now, then], now.figures, observed_in(replay, spec.pp))
    old = current.as_dict()
    changes = {k: v for k, v in proposed.as_dict().items() if old[k] != v}
    return PreviewResult(now, then, changes, replay.note, spec.describe)


def observed_in(replay: Replay, num_stages: int) -> RunFigures | None:
    """What the run did over the replayed arrivals (None: the replay does not carry the run's spans)."""
    return observed_over(replay.observed, replay, num_stages) if replay.observed else None


# ---- after Apply ----------------------------------------------------------------------------------
def observed_since(spans: Sequence[Span], since_ns: int, num_stages: int, until_ns: int | None = None,
                   meta: Mapping[str, Any] | None = None) -> RunFigures:
    """The run's figures over the requests that arrived at or after ``since_ns`` (a knob change), up to
    ``until_ns`` (None: all since), and every step that started from then until the last of them ended."""
    until = until_ns if until_ns is not None else max((s["t0"] for s in spans), default=0)
    reqs = [s for s in spans if s["n"] == N.REQUEST and since_ns <= s["t0"] <= until]
    end = max((s["t1"] for s in reqs), default=since_ns)
    after = reqs + [s for s in spans if s["n"] != N.REQUEST and since_ns <= s["t0"] <= end]
    base = {"policy": "", "engine": "", "model": "", "hardware": "", "concurrency": 0, "workload": ""}
    return compute_figures(after, num_stages, {**base, **(meta or {})})


# ---- from a run's record ----------------------------------------------------------------------------
def replay_of(spans: Sequence[Span], meta: Mapping[str, Any], window_s: float | None = DEFAULT_WINDOW_S) -> Replay:
    """The arrivals to replay from a run's spans; its concurrency and loop kind from ``meta`` (a
    saved run's, or what a live source knows), else estimated from the spans."""
    arrivals, note, start = arrivals_from_spans(spans, window_s)
    concurrency = int(meta.get("concurrency") or 0) or max_outstanding(arrivals)
    end = start + round(arrivals[-1].offset_s * 1e9) if arrivals else start
    observed = tuple(s for s in spans if s["t0"] >= start) if arrivals else ()
    return Replay(tuple(arrivals), concurrency, str(meta.get("workload", "")).startswith("trace:"), note, start, end,
                  observed)


def knobs_at_end(meta: Mapping[str, Any], knob_changes: Sequence[Mapping[str, Any]]) -> Knobs:
    """The knobs a saved run ended with: its starting knobs and every change it recorded."""
    from wavepp.runtime.knobs import KnobError, from_changes
    values = dict(meta.get("knobs") or {})
    for change in knob_changes:
        values.update(change.get("changes") or {})
    try:
        return from_changes(values, {})
    except KnobError as exc:
        raise WhatIfError(f"the run's knobs are not valid: {exc}") from None
