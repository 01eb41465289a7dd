"""Suggest knobs: search a small grid of wave budget M, its floor b_min and the ring R on the replay of
a run's recent arrivals (:mod:`runtime.whatif`) for a goal the operator picks, and propose the best
setting with its predicted gain. Nothing is applied here: the operator applies it (Knobs page, or
``wavepp knobs --set``)."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

from wavepp.runtime.knobs import Knobs
from wavepp.runtime.report import RunFigures
from wavepp.runtime.whatif import (
    DEFAULT_TIME_LIMIT_S,
    Deadline,
    Prediction,
    Progress,
    Replay,
    SimSpec,
    TimeLimit,
    WhatIfError,
    anchored,
    calibrated,
    check_replay,
    observed_in,
    predict,
    predict_each,
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
    best: Prediction
    tried: list[Prediction] = field(default_factory=list)
    planned: int = 0              # settings in the grid (more than tried: the time limit cut the search)
    replay_note: str = ""
    sim: str = ""

    @property
    def changes(self) -> dict[str, Any]:
        return {k: v for k, v in self.best.knobs.items() if self.current.knobs[k] != v}

    @property
    def complete(self) -> bool:
        return len(self.tried) >= self.planned


def suggest(replay: Replay, spec: SimSpec, current: Knobs, goal: Goal,
            time_limit_s: float = DEFAULT_TIME_LIMIT_S, progress: Progress | None = None) -> Suggestion:
    """Search :func:`suggest_grid` on the replay for ``goal``; the best setting found within the time
    limit (at least the current one, which must finish in time). Where a setting's prediction is the
    mean of several replays (a real-time run's), the grid is searched with one replay each and the
    best and the current setting are then replayed ``spec.repeats`` times, taking turns."""
    check_replay(replay)
    grid = suggest_grid(current, spec.pp, spec.block_size)
    spec = calibrated(replay, spec)
    screen = dataclasses.replace(spec, repeats=1)
    confirm = 2 * spec.repeats if spec.repeats > 1 else 0
    deadline = Deadline(time_limit_s, len(grid) + confirm, progress)
    base = predict(replay, screen, current, deadline, "current knobs")
    floor = goal.floor if goal.floor is not None else (base.figures.input_tokens_per_s or 0.0)
    tried = [base]
    for i, knobs in enumerate(grid[1:], 2):
        try:
            tried.append(predict(replay, screen, knobs, deadline, f"setting {i}/{len(grid)}"))
        except TimeLimit:
            break
    scored = [(goal.score(p.figures, floor), -n, p) for n, p in enumerate(tried)]
    ranked = sorted(((s, n, p) for s, n, p in scored if s is not None), key=lambda x: (x[0], x[1]), reverse=True)
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
            # beats the current setting when both are replayed as often.
            floor = goal.floor if goal.floor is not None else (again.figures.input_tokens_per_s or 0.0)
            score, current_score = goal.score(best.figures, floor), goal.score(again.figures, floor)
            base = again
            if score is None or (current_score is not None and score <= current_score):
                best = base
    base, best = anchored([base, best], base.figures, observed_in(replay, spec.pp))
    return Suggestion(goal.describe(floor), base, best, tried, len(grid), replay.note, spec.describe)
