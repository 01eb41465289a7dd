"""Analytic vs table step time of one stage over a grid of chunk shapes (``wavepp cost-table``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from wavepp.runtime.engines.sim.costmodel import AnalyticCostModel, ChunkShape
from wavepp.runtime.engines.sim.profiles import get_hardware, get_model
from wavepp.runtime.engines.sim.table_cost import load_table_cost_model


@dataclass(frozen=True, slots=True)
class StepComparison:
    """One wave of a single chunk: ``tokens`` new tokens after ``context`` cached ones, in seconds."""

    tokens: int
    context: int
    analytic_s: float
    table_s: float


def compare_step_times(model: str, hardware: str, pp: int, stage: int, tokens: Sequence[int],
                       contexts: Sequence[int], gpus_per_stage: int | None = None,
                       perf_dir: str | Path | None = None) -> list[StepComparison]:
    """Both models' step time of ``stage`` for every (x, L); GPUs per stage default as the sim engine's."""
    m, hw = get_model(model), get_hardware(hardware)
    gps = gpus_per_stage or max(1, hw.gpus_per_node // pp)
    analytic = AnalyticCostModel(m, hw, pp, gps)
    table = load_table_cost_model(m.name, hw.name, pp, gps, perf_dir)
    if not 0 <= stage < pp:
        raise ValueError(f"stage must be in [0, {pp}), got {stage}")
    rows = []
    for x in tokens:
        for lo in contexts:
            wave = [ChunkShape(lo, x)]
            rows.append(StepComparison(x, lo, analytic.step_time(stage, wave), table.step_time(stage, wave)))
    return rows


def markdown(rows: Sequence[StepComparison]) -> str:
    """A Markdown table: one row per x, per L the analytic and table milliseconds and their ratio."""
    contexts = sorted({r.context for r in rows})
    head = "| x \\ L | " + " | ".join(f"{_k(c)}: analytic / table ms (table/analytic)" for c in contexts) + " |"
    lines = [head, "|---" * (len(contexts) + 1) + "|"]
    for x in sorted({r.tokens for r in rows}):
        cells = [next(r for r in rows if r.tokens == x and r.context == c) for c in contexts]
        text = [f"{r.analytic_s * 1e3:.1f} / {r.table_s * 1e3:.1f} ({r.table_s / r.analytic_s:.2f}×)" for r in cells]
        lines.append(f"| {_k(x)} | " + " | ".join(text) + " |")
    return "\n".join(lines)


def _k(n: int) -> str:
    return f"{n // 1024}K" if n and n % 1024 == 0 else str(n)
