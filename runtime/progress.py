"""Terminal output of ``wavepp bench``: a progress bar while runs go, a table at the end."""

from __future__ import annotations

from collections.abc import Sequence
from types import TracebackType

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn
from rich.table import Table

from runtime.idle_causes import top_causes
from runtime.report import RunFigures


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


def _ms(seconds: float | None) -> str:
    """A figure the run was too short for prints as "-", never as 0.00."""
    return "-" if seconds is None else f"{seconds * 1e3:.2f}"


def print_table(figures: Sequence[RunFigures]) -> None:
    t = Table(title="wavepp bench", show_lines=False)
    for col in ("policy", "c", "input tok/s", "computed tok/s", "vs first", "pipe eff", "max bubble",
                "adm int p50/p99 ms", "req/round", "adm lat p99 ms", "prefill p50/p95 s", "good hit", "fallbacks",
                "failed"):
        t.add_column(col, justify="right")
    base: dict[int, float] = {}
    for f in figures:
        base.setdefault(f.concurrency, f.input_tokens_per_s)
        ratio = f.input_tokens_per_s / base[f.concurrency] if base[f.concurrency] else 0.0
        hit = "-" if f.good_hit_rate is None else f"{f.good_hit_rate:.3f}"
        t.add_row(f.policy, str(f.concurrency), f"{f.input_tokens_per_s:,.0f}", f"{f.computed_tokens_per_s:,.0f}",
                  f"{ratio:.3f}x", f"{f.pipeline_efficiency:.3f}", f"{max(f.bubble_fraction, default=0):.3f}",
                  f"{_ms(f.admission_interval_p50_s)}/{_ms(f.admission_interval_p99_s)}",
                  "-" if f.requests_per_round_mean is None else f"{f.requests_per_round_mean:.1f}",
                  f"{f.admission_latency_p99_s * 1e3:.2f}",
                  f"{f.prefill_latency_p50_s:.2f}/{f.prefill_latency_p95_s:.2f}", hit, str(f.fallbacks),
                  str(f.failed))
    console = Console()
    if not console.is_terminal:
        console = Console(width=220)      # piped or logged: keep the table on one line per run
    console.print(t)
    console.print("where the time went (idle share of the makespan per stage, top causes):")
    for f in figures:
        stages = [f"s{s} {b:.1%}" + (f" ({top_causes(c, f.makespan_s)})" if b > 0.0005 else "")
                  for s, (b, c) in enumerate(zip(f.bubble_fraction, f.idle_causes_s, strict=True))]
        console.print(f"  {f.policy} c={f.concurrency}: " + " · ".join(stages), highlight=False)
