"""Predictions: the replays of one knob setting or several (the same loop, the sim), their figures
measured like the run's (:mod:`runtime.whatif.measure`), under one time limit (:class:`Deadline`)."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from wavepp.runtime.bench.runs import BenchConfig, RunRecord, run_one
from wavepp.runtime.control.knobs import Knobs
from wavepp.runtime.figures.report import RunFigures
from wavepp.runtime.sources.traces import TraceWorkload
from wavepp.runtime.sources.workloads import WorkloadSpec
from wavepp.runtime.whatif.measure import idle_shares, measured_figures, median_run
from wavepp.runtime.whatif.replay import Replay, WhatIfError, rebuild_trace
from wavepp.runtime.whatif.sim import SimSpec

DEFAULT_TIME_LIMIT_S = 60.0

Progress = Callable[[float, str], None]       # (fraction done, what runs now)


class TimeLimit(WhatIfError):
    """The replay ran past its time limit."""


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
