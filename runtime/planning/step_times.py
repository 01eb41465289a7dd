"""How long a wave takes on each stage: ``t(L, x)`` fitted per stage, refit online from the steps run.

DESIGN §2 models a chunk of x new tokens after L tokens of context as ``γ·L + β·x + α·(2·L·x + x²)``
on one stage. A stage runs a whole wave at once (the linear layers over all its tokens, attention
chunk by chunk), so one step of n chunks costs

    t = c + Σ (c_chunk + γ·L_i + β·x_i + α_lx·L_i·x_i + α_xx·x_i²)

``c`` is paid once per wave and ``c_chunk`` once per chunk. The attention term has two coefficients
instead of DESIGN's one because kernels differ in what they skip (a causal kernel skipping the
masked half of the chunk's own block costs ``∝ 2·L·x + x²``; a masked kernel scoring the whole
``x × (L + x)`` rectangle ``∝ L·x + x²``): the fit finds which.

:func:`fit` solves least squares on *relative* residuals (a 20 ms wave counts as much as a 700 ms one)
with every coefficient non-negative: a negative per-chunk or per-token cost has no physical meaning
and would make a long context look cheap. :class:`StepTimes` keeps each stage's recent steps and
refits when asked after new ones arrived (the planner asks; a policy that never asks never pays).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

Shape = tuple[int, int]            # (context L, new tokens x) of one chunk
# (stage, chunks) -> seconds: an engine's own step cost, a pure function of its arguments (the planners'
# predictions of a wave are remembered, PREDICT_MEMO)
StepModel = Callable[[int, Sequence[Shape]], float]
MIN_SAMPLES = 12                   # steps of a stage before its online fit replaces the prior
WINDOW = 512                       # the most recent steps a refit uses
# Waves whose predicted time (by the engine's model) is remembered, the table cleared when full. A planner
# prices the same few waves over and over (the Mooncake replay: 58,452 predictions of 8,969 distinct waves),
# each a call of the model per stage.
PREDICT_MEMO = 1 << 14


@dataclass(frozen=True, slots=True)
class StageFit:
    c: float                                 # per wave
    c_chunk: float                           # per chunk
    gamma: float                             # per token of context
    beta: float                              # per new token
    alpha_lx: float                          # per (context x new) token pair
    alpha_xx: float                          # per (new x new) token pair

    def chunk_time(self, context: int, tokens: int) -> float:
        return (self.c_chunk + self.gamma * context + self.beta * tokens
                + self.alpha_lx * context * tokens + self.alpha_xx * tokens * tokens)

    def step_time(self, chunks: Sequence[Shape]) -> float:
        """Seconds for one wave of (context, tokens) chunks on this stage (0 for an empty wave)."""
        if not chunks:
            return 0.0
        return max(0.0, self.c + sum(self.chunk_time(L, x) for L, x in chunks))


def features(chunks: Sequence[Shape]) -> list[float]:
    """The design-matrix row of one step: 1, n, ΣL, Σx, ΣL·x, Σx²."""
    return [1.0, float(len(chunks)), float(sum(L for L, _ in chunks)), float(sum(x for _, x in chunks)),
            float(sum(L * x for L, x in chunks)), float(sum(x * x for _, x in chunks))]


def fit(rows: Sequence[Sequence[float]], seconds: Sequence[float]) -> StageFit:
    """Non-negative least squares of the wave model on relative residuals: a coefficient the
    unconstrained solution makes negative is fixed at 0 and the rest refit (an active set; six
    coefficients, so at most six rounds)."""
    a = np.asarray(rows, dtype=float)
    t = np.asarray(seconds, dtype=float)
    keep = t > 0
    a, t = a[keep] / t[keep, None], np.ones(int(keep.sum()))
    free = list(range(a.shape[1]))
    coef = np.zeros(a.shape[1])
    while free:
        sol, *_ = np.linalg.lstsq(a[:, free], t, rcond=None)
        if (sol >= 0).all():
            coef[free] = sol
            break
        free = [f for f, v in zip(free, sol, strict=True) if v > 0]
    return StageFit(*(float(v) for v in coef))


def fit_waves(samples: Sequence[tuple[int, int, int, float]]) -> StageFit:
    """:func:`fit` over (L, x, n, seconds) samples: waves of n equal chunks (a calibration's grid)."""
    return fit([features([(L, x)] * n) for L, x, n, _ in samples], [s[3] for s in samples])


class StepTimes:
    """Per-stage predicted step times: the ``prior`` fits until a stage has run ``MIN_SAMPLES``
    steps, then a fit of its last ``WINDOW`` steps (refit lazily, when a prediction is asked for
    after new steps arrived). An engine that prices its own steps (the sim's kernel tables) gives
    its ``model`` too: :meth:`predict` then asks it, as the engine itself would charge the wave."""

    def __init__(self, num_stages: int, prior: Callable[[], Sequence[StageFit] | None] | None = None,
                 model: StepModel | None = None) -> None:
        """``prior``: the engine's own fits, asked for only when a prediction is first needed.
        ``model``: the engine's own step cost, where it has one."""
        self.num_stages = num_stages
        self.model = model
        self._prior = prior
        self.fits: list[StageFit | None] = [None] * num_stages
        self._rows: list[deque[list[float]]] = [deque(maxlen=WINDOW) for _ in range(num_stages)]
        self._seconds: list[deque[float]] = [deque(maxlen=WINDOW) for _ in range(num_stages)]
        self._stale = [False] * num_stages
        self._predicted: dict[tuple[Shape, ...], float] = {}    # by the model: chunks -> seconds (PREDICT_MEMO)

    def observe(self, stage: int, chunks: Sequence[Shape], seconds: float) -> None:
        """Stage ``stage`` ran a wave of ``chunks`` in ``seconds``."""
        if chunks and seconds > 0:
            self._rows[stage].append(features(chunks))
            self._seconds[stage].append(seconds)
            self._stale[stage] = True

    def fit_of(self, stage: int) -> StageFit | None:
        if self._prior is not None:
            prior, self._prior = self._prior(), None
            if prior is not None:
                if len(prior) != self.num_stages:
                    raise ValueError(f"a prior fit per stage: {self.num_stages} stages, {len(prior)} fits")
                self.fits = [f if f is not None else p for f, p in zip(self.fits, prior, strict=True)]
        if self._stale[stage] and len(self._rows[stage]) >= MIN_SAMPLES:
            self.fits[stage] = fit(list(self._rows[stage]), list(self._seconds[stage]))
            self._stale[stage] = False
        return self.fits[stage]

    @property
    def ready(self) -> bool:
        """Every stage has a fit (a prior, or enough steps of its own)."""
        return all(self.fit_of(s) is not None for s in range(self.num_stages))

    def stage_fits(self) -> list[StageFit]:
        fits = [self.fit_of(s) for s in range(self.num_stages)]
        if any(f is None for f in fits):
            raise ValueError("no step-time fit yet for every stage")
        return [f for f in fits if f is not None]

    @property
    def can_predict(self) -> bool:
        """Whether :meth:`predict` has something to predict with (the engine's model, or every stage's fit)."""
        return self.model is not None or self.ready

    def predict(self, chunks: Sequence[Shape]) -> float:
        """Seconds of one wave of ``chunks`` on its slowest stage (the wave's time in a pipeline of
        stages in step): by the engine's own model where it has one, else by the fits."""
        if self.model is not None:
            key = tuple(chunks)
            seconds = self._predicted.get(key)
            if seconds is None:
                if len(self._predicted) >= PREDICT_MEMO:
                    self._predicted.clear()
                seconds = self._predicted[key] = max(self.model(s, chunks) for s in range(self.num_stages))
            return seconds
        return max(f.step_time(chunks) for f in self.stage_fits())
