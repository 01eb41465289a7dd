"""Fit a real-time run's what-if replay to what the run measured over the replayed window.

A run on the wall clock (the torch engine, a real-time sim) pays its loop's own work - admission,
planning, span recording, task switches - in real time, on one thread, and a modelled step then
starts late. Its replay runs the same code on the CPU clock (:class:`runtime.engines.sim.clock.
CpuClockLoop`), where that work costs the CPU time the replay's thread spends on it. What is read
from the run's own spans (no replay needed):

- ``fit_cpu_scale``: the loop's pure-CPU spans (admission rounds, wave plans, stage preparation)
  carry the CPU time the loop's thread spent in them (``wavepp.loop.cpu_s``); their wall time over
  it, the median, is how much of a core the loop had. It is shown, not charged. Charging it (every
  CPU second of the replay times it) was tried and measured worse: on a loaded machine a fitted
  x1.42 turned the +43% observed gain of M=4096/b_min=1024 into +17% predicted (x1.0: +40%), and one
  replay of a no-op change stalled at a fifth of the run's rate. The long spans it is measured on
  are preempted more than the many short callbacks after a wait (Linux favours a thread that
  wakes), so one factor over-charges exactly the work that smaller waves add. The level the load
  sets is taken from the run instead (:func:`runtime.whatif.preview.anchored`).
- ``fit_steps`` (torch only; a sim's steps are its own model): per stage, the steps the run timed
  against the cost model's time for the same chunks, fitted as ``scale x modelled + offset`` by least
  squares - a calibration profile measured on an idle machine, replayed under the load the run ran
  under. The offset is what a step costs whatever its size (the stage thread's dispatch, waking
  the loop): without it, a change to smaller waves would be predicted too fast. Where the steps'
  modelled times hardly vary (an offset cannot be told from a scale) or the fit is not
  physical (scale or offset below 0), the ratio of their sums alone.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

from wavepp.runtime.engines.sim.costmodel import ChunkShape, CostModel
from wavepp.telemetry import names as N

Span = dict[str, Any]

MIN_SPANS = 8                 # fewer than this say nothing about a cost
MIN_CPU_S = 20e-6             # a span this short is timer noise, not loop work
SCALE_RANGE = (0.1, 10.0)     # a fit outside this is a measurement gone wrong, not a machine
MIN_SPREAD = 0.15             # steps' modelled times vary less than this (relative): fit a ratio only


def _dur(s: Span) -> float:
    return float(s["t1"] - s["t0"]) / 1e9


def fit_cpu_scale(observed: Sequence[Span]) -> float | None:
    """Wall time over loop CPU time of the run's pure-CPU spans, the median (module doc); None when
    fewer than ``MIN_SPANS`` spans say (a run recorded before spans carried it)."""
    ratios = []
    for s in observed:
        cpu = s["a"].get(N.LOOP_CPU_S)
        if isinstance(cpu, int | float) and cpu >= MIN_CPU_S:
            ratios.append(_dur(s) / cpu)
    if len(ratios) < MIN_SPANS:
        return None
    low, high = SCALE_RANGE
    return min(max(statistics.median(ratios), low), high)


def fit_steps(observed: Sequence[Span], cost_model: CostModel, num_stages: int,
              time_scale: float = 1.0) -> tuple[tuple[float, float], ...] | None:
    """Per stage ``(scale, offset_s)`` of the run's timed steps against the cost model's (module doc);
    ``(1, 0)`` for a stage with too few steps; None when no stage ran any."""
    pairs: list[list[tuple[float, float]]] = [[] for _ in range(num_stages)]
    for s in observed:
        if s["n"] != N.EXECUTE:
            continue
        stage = s["a"].get(N.STAGE)
        starts, tokens = s["a"].get(N.CHUNK_STARTS) or (), s["a"].get(N.CHUNK_TOKENS) or ()
        if not isinstance(stage, int) or not 0 <= stage < num_stages or not tokens:
            continue
        shapes = [ChunkShape(int(a), int(n)) for a, n in zip(starts, tokens, strict=False)]
        pairs[stage].append((cost_model.step_time(stage, shapes) * time_scale, _dur(s)))
    if not any(pairs):
        return None
    return tuple(_fit_line(p) for p in pairs)


def _fit_line(points: Sequence[tuple[float, float]]) -> tuple[float, float]:
    if len(points) < MIN_SPANS:
        return 1.0, 0.0
    low, high = SCALE_RANGE
    xs, ys = [x for x, _ in points], [y for _, y in points]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    if mx <= 0:
        return 1.0, 0.0
    ratio = min(max(my / mx, low), high)
    if statistics.pstdev(xs) < MIN_SPREAD * mx:
        return ratio, 0.0
    slope = sum((x - mx) * (y - my) for x, y in points) / sum((x - mx) ** 2 for x in xs)
    offset = my - slope * mx
    if not low <= slope <= high or offset < 0:
        return ratio, 0.0
    return slope, offset


def describe(loop_wall_over_cpu: float | None, step_fit: Sequence[tuple[float, float]] | None,
             wake_s: float = 0.0) -> str:
    """The fit in words: 'the run's loop spans 1.42x their CPU time, wake-up 0.20 ms, steps
    x0.54+9.7ms / x0.51+19.7ms'."""
    text = f"wake-up {wake_s * 1e3:.2f} ms"
    if loop_wall_over_cpu is not None:
        text = f"the run's loop spans {loop_wall_over_cpu:.2f}x their CPU time, " + text
    if step_fit is not None:
        text += ", steps " + " / ".join(f"x{a:.2f}" + (f"+{b * 1e3:.1f}ms" if b > 0 else "") for a, b in step_fit)
    return text
