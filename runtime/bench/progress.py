"""Terminal output of ``wavepp bench``: a progress bar while runs go, a table at the end."""

from __future__ import annotations

from collections.abc import Sequence
from types import TracebackType

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn
from rich.table import Table

from wavepp.runtime.figures.idle_causes import top_causes
from wavepp.runtime.figures.report import RunFigures, fmt
from wavepp.runtime.runs.runfile import load_label


class BenchProgress:
    """One bar per run; ``update`` is the loop's progress callback."""

    def __init__(self, disabled: bool = False) -> None:
        self._bar = Progress(TextColumn("{task.description:>20}"), BarColumn(), MofNCompleteColumn(),
                             TimeElapsedColumn(), disable=disabled, transient=False)
        self._tasks: dict[str, TaskID] = {}

    def __enter__(self) -> BenchProgress:
        self._bar.__enter__()
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None) -> None:
        self._bar.__exit__(et, ev, tb)

    def update(self, label: str, done: int, total: int) -> None:
        if label not in self._tasks:
            self._tasks[label] = self._bar.add_task(label, total=total)
        self._bar.update(self._tasks[label], completed=done)


def print_table(figures: Sequence[RunFigures]) -> None:
    t = Table(title="wavepp bench", show_lines=False)
    for col in ("policy", "c", "input tok/s", "computed tok/s", "vs first", "pipe eff", "max bubble",
                "adm int p50/p99 ms", "req/round", "adm lat p99 ms", "prefill p50/p95 s", "good hit", "in flight",
                "fallbacks", "evictions", "failed"):
        t.add_column(col, justify="right")
    base: dict[int, float | None] = {}
    for f in figures:
        first = base.setdefault(f.concurrency, f.input_tokens_per_s)
        ratio = f.input_tokens_per_s / first if f.input_tokens_per_s is not None and first else None
        policy = f.policy + (" (stalled)" if f.stalled else "")     # figures to the stall: see the line below
        load = str(f.concurrency or "open")          # 0: no cap (load_label)
        t.add_row(policy, load, fmt(f.input_tokens_per_s, ",.0f"), fmt(f.computed_tokens_per_s, ",.0f"),
                  fmt(ratio, ".3f") + ("x" if ratio is not None else ""), fmt(f.pipeline_efficiency, ".3f"),
                  fmt(max(f.bubble_fraction, default=0) if f.bubble_fraction is not None else None, ".3f"),
                  f"{fmt(f.admission_interval_p50_s, '.2f', 1e3)}/{fmt(f.admission_interval_p99_s, '.2f', 1e3)}",
                  fmt(f.requests_per_round_mean, ".1f"), fmt(f.admission_latency_p99_s, ".2f", 1e3),
                  f"{fmt(f.prefill_latency_p50_s, '.2f')}/{fmt(f.prefill_latency_p95_s, '.2f')}",
                  fmt(f.good_hit_rate, ".3f"), fmt(f.sharing_in_flight, ".3f"), str(f.fallbacks),
                  f"{sum(f.evictions):,}", str(f.failed))
    console = Console()
    if not console.is_terminal:
        console = Console(width=220)      # piped or logged: keep the table on one line per run
    console.print(t)
    console.print("where the time went (idle share of the makespan per stage, top causes):")
    for f in figures:
        if f.bubble_fraction is None or f.makespan_s is None:      # nothing completed: no makespan to share
            continue
        stages = [f"s{s} {b:.1%}" + (f" ({top_causes(c, f.makespan_s)})" if b > 0.0005 else "")
                  for s, (b, c) in enumerate(zip(f.bubble_fraction, f.idle_causes_s, strict=True))]
        lost = max(f.recompute_s, default=0.0)
        if lost > 0:     # busy, not idle: work a late fallback threw away (runtime/figures/recomputation.py)
            stages.append(f"recomputation after late fallbacks up to {lost / f.makespan_s:.1%}")
        console.print(f"  {f.policy} {load_label(f.concurrency)}: " + " · ".join(stages), highlight=False)
    for f in figures:
        if f.stalled:
            console.print(f"  {f.policy} {load_label(f.concurrency)} stalled (its figures are to the stall): "
                          f"{f.stalled}", highlight=False)
