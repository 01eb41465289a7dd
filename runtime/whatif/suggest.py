"""Suggest knobs: search a small grid of wave budget M, its floor b_min and the ring R on the replay of
a run's recent arrivals (:mod:`runtime.whatif.preview`) for a goal the operator picks, and propose the best
setting with its predicted gain. Nothing is applied here: the operator applies it (Knobs page, or
``wavepp knobs --set``)."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from wavepp.runtime.control.knobs import Knobs
from wavepp.runtime.figures.report import RunFigures
from wavepp.runtime.whatif.preview import (
    DEFAULT_TIME_LIMIT_S,
    Deadline,
    Prediction,
    Progress,
    Replay,
    ReplayError,
    SimSpec,
    TimeLimit,
    WhatIfError,
    anchored,
    calibrated,
    check_replay,
    gain,
    observed_in,
    predict,
    predict_each,
    replay_error,
)

GOALS = ("throughput", "latency")


@dataclass(frozen=True, slots=True)
class Goal:
    """``throughput`` (highest input tokens/s) or ``latency`` (lowest p95 prefill latency among the
    settings whose throughput stays at or above ``floor`` tokens/s; None: the current setting's)."""

    kind: str = "throughput"
    floor: float | None = None

    def __post_init__(self) -> None:
        if self.kind not in GOALS:
            raise WhatIfError(f"unknown goal {self.kind!r} (throughput or latency)")
        if self.floor is not None and not (self.floor >= 0 and math.isfinite(self.floor)):
            raise WhatIfError(f"the throughput floor must be a finite number >= 0, got {self.floor}")

    def score(self, figures: RunFigures, floor: float) -> float | None:
        """Higher is better; None: the setting does not qualify."""
        tput, p95 = figures.input_tokens_per_s, figures.prefill_latency_p95_s
        if tput is None:
            return None
        if self.kind == "throughput":
            return tput
        return -p95 if p95 is not None and tput >= floor else None

    def describe(self, floor: float) -> str:
        return "highest input throughput" if self.kind == "throughput" else \
            f"lowest p95 prefill latency at >= {floor:,.0f} input tok/s"


def suggest_grid(current: Knobs, num_stages: int, block_size: int) -> list[Knobs]:
    """Wave budget M at half, the same and twice the current one; its floor b_min at a quarter and
    half of M; the ring at P, 2P and 4P - the current setting first."""
    def align(n: int) -> int:
        return max(block_size, n // block_size * block_size)
    out = [current]
    for m in dict.fromkeys(align(int(current.max_wave_tokens * f)) for f in (0.5, 1, 2)):
        for b in dict.fromkeys(align(m // d) for d in (4, 2)):
            for ring in (num_stages, 2 * num_stages, 4 * num_stages):
                k = current.replace(max_wave_tokens=int(m), min_wave_tokens=int(b), ring=ring)
                if k not in out:
                    out.append(k)
    return out


@dataclass(frozen=True, slots=True)
class Suggestion:
    goal: str                     # what was optimised, in words
    current: Prediction
    best: Prediction              # the current setting unless another beats it by more than the error
    tried: list[Prediction] = field(default_factory=list)   # the screening's replays, in grid order
    planned: int = 0              # settings in the grid (more than tried: the time limit cut the search)
    replay_note: str = ""
    sim: str = ""
    error: ReplayError = ReplayError(None)   # the replay's own error (a gain within it is not proposed)
    within_noise: int = 0         # settings tried whose difference from the current one is within it

    @property
    def changes(self) -> dict[str, Any]:
        return {k: v for k, v in self.best.knobs.items() if self.current.knobs[k] != v}

    @property
    def complete(self) -> bool:
        return len(self.tried) >= self.planned


def improvement(goal: Goal, base: RunFigures, other: RunFigures, floor: float) -> float | None:
    """How much better ``other`` is than ``base`` for ``goal``, relative (0.05: 5 % more throughput, or
    a p95 5 % shorter); None: ``other`` does not qualify."""
    if goal.score(other, floor) is None:
        return None
    if goal.kind == "throughput":
        return gain(base.input_tokens_per_s, other.input_tokens_per_s)
    after = gain(base.prefill_latency_p95_s, other.prefill_latency_p95_s)
    return -after if after is not None else None


def suggest(replay: Replay, spec: SimSpec, current: Knobs, goal: Goal,
            time_limit_s: float = DEFAULT_TIME_LIMIT_S, progress: Progress | None = None,
            resume: Suggestion | None = None, within: Callable[[Knobs], bool] | None = None) -> Suggestion:
    """Search :func:`suggest_grid` on the replay for ``goal`` (``within``: only the settings it accepts, the
    autopilot's bounds, besides the current one); ``resume``: a search the time limit cut,
    continued from the settings it tried. A setting is proposed only if it beats the current one by
    more than the replay's error (:mod:`runtime.whatif.noise`); one within it is counted, never
    ranked. Where a setting's prediction is the median of several replays (a real-time run's), the
    grid is searched with one replay each and the best and the current setting are then replayed
    ``spec.repeats`` times, taking turns."""
    check_replay(replay)
    grid = suggest_grid(current, spec.pp, spec.block_size)
    if within is not None:
        grid = grid[:1] + [k for k in grid[1:] if within(k)]
    spec = calibrated(replay, spec)
    screen = dataclasses.replace(spec, repeats=1)
    confirm = 2 * spec.repeats if spec.repeats > 1 else 0
    tried = list(resume.tried) if resume is not None and resume.tried and resume.planned == len(grid) else []
    deadline = Deadline(time_limit_s, len(grid) - len(tried) + confirm, progress)
    if not tried:
        tried.append(predict(replay, screen, current, deadline, "current knobs"))
    base = tried[0]
    observed = observed_in(replay, spec.pp)
    error = replay_error(base.figures, base.throughputs, observed)
    floor = goal.floor if goal.floor is not None else (base.figures.input_tokens_per_s or 0.0)
    for i, knobs in enumerate(grid[len(tried):], len(tried) + 1):
        try:
            tried.append(predict(replay, screen, knobs, deadline, f"setting {i}/{len(grid)}"))
        except TimeLimit:
            break
    better = [(improvement(goal, base.figures, p.figures, floor), -n, p) for n, p in enumerate(tried[1:], 1)]
    noisy = sum(1 for x, _, _ in better if x is not None and error.within(x))
    ranked = sorted(((x, n, p) for x, n, p in better if x is not None and x > error.noise),
                    key=lambda t: (t[0], t[1]), reverse=True)
    best = ranked[0][2] if ranked else base
    if confirm and best is not base:
        try:
            again, best = predict_each(replay, spec, [(current, "current knobs, again"),
                                                      (grid[tried.index(best)], "the best setting, again")],
                                       deadline)
        except TimeLimit:
            pass                      # the screening's figures stand
        else:
            # The screening's winner may have won by one replay's luck: it stands only if it still
            # beats the current setting by more than the error when both are replayed as often.
            floor = goal.floor if goal.floor is not None else (again.figures.input_tokens_per_s or 0.0)
            error = replay_error(again.figures, again.throughputs, observed)
            x = improvement(goal, again.figures, best.figures, floor)
            base = again
            if x is None or x <= error.noise:
                best = base
    if spec.clock == "cpu":       # a real-time run: the replay's speed is the machine's (whatif_anchor)
        base, best = anchored([base, best], base.figures, observed)
    return Suggestion(goal.describe(floor), base, best, tried, len(grid), replay.note, spec.describe, error, noisy)
