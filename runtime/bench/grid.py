"""``wavepp grid``: a declared grid of settings, every policy on each, one summary.

A setting is (model, workload, concurrency) on one hardware and P; every policy runs it with the
same seeded requests (:func:`runtime.bench.runs.run_one`). The first policy is the subject, the others
its baselines: per setting the subject's ratio to the best baseline, and the idle causes of
whichever lost. Settings run in parallel processes with ``jobs > 1``.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from multiprocessing import get_context
from typing import Any

from wavepp.runtime.figures.idle_causes import CAUSES
from wavepp.runtime.figures.report import fmt

DEFAULT_MODELS = ("glm-5.2", "minimax-m2.7")
DEFAULT_WORKLOADS = ("cold", "reuse90", "mixed", "suffix4k", "suffix16k")
DEFAULT_CONCURRENCY = (8, 32, 64, 128)
DEFAULT_POLICIES = ("wavepp", "trtllm-pp", "trtllm-pp-legacy")     # the subject first, then the baselines
KEPT = ("input_tokens_per_s", "computed_tokens_per_s", "pipeline_efficiency", "prefill_latency_p50_s",
        "prefill_latency_p95_s", "completed", "failed", "good_hit_rate", "sharing_in_flight", "fallbacks", "evictions",
        "stalled")


@dataclass(frozen=True, slots=True)
class Setting:
    """One setting of a grid: a model, a workload at a concurrency; ``requests`` per run (None: the
    grid's), ``kv_blocks`` per stage (None: what the deployment's memory holds), ``label`` for tables."""

    model: str
    workload: str
    concurrency: int
    requests: int | None = None
    kv_blocks: tuple[int, ...] | None = None
    label: str = ""
    prompt_tokens: int | None = None      # the typical prompt (a docs workload's mean); None: the engine's

    @property
    def key(self) -> tuple[str, str, int]:
        return self.model, self.label or self.workload, self.concurrency


@dataclass(frozen=True, slots=True)
class GridSpec:
    models: Sequence[str] = DEFAULT_MODELS
    hardware: str = "b300"
    pp: int = 4
    workloads: Sequence[str] = DEFAULT_WORKLOADS
    concurrencies: Sequence[int] = DEFAULT_CONCURRENCY
    policies: Sequence[str] = DEFAULT_POLICIES
    requests: int | None = None          # per run; default max(512, 4 x c) as in ``wavepp bench``
    seed: int = 0
    perf_dir: str | None = None
    host_scale: float = 1.0              # multiplies the baselines' lockstep host work
    variants: Sequence[str] = ()         # the subject's own alternatives: run and reported, no baseline
    explicit: Sequence[Setting] | None = None   # a declared list of settings instead of the product
    name: str = "paper"

    def settings(self) -> list[Setting]:
        if self.explicit is not None:
            return list(self.explicit)
        return [Setting(m, w, c) for m, w, c in itertools.product(self.models, self.workloads, self.concurrencies)]

    @property
    def all_policies(self) -> list[str]:
        return [*self.policies, *self.variants]


@dataclass(slots=True)
class GridRow:
    model: str
    workload: str
    concurrency: int
    runs: dict[str, dict[str, Any]] = field(default_factory=dict)   # policy -> figures kept (KEPT + idle)
    subject: str = ""
    best_baseline: str = ""
    ratio: float = 0.0                    # subject's input throughput / the best baseline's
    loser_causes: list[tuple[str, float]] = field(default_factory=list)   # top idle causes of the loser
    variants: list[str] = field(default_factory=list)   # the subject's alternatives (no baselines)

    def as_dict(self) -> dict[str, Any]:
        return {"model": self.model, "workload": self.workload, "concurrency": self.concurrency,
                "subject": self.subject, "best_baseline": self.best_baseline, "ratio": self.ratio,
                "variants": {v: variant_ratio(self, v) for v in self.variants},
                "loser_idle_causes": [{"cause": c, "share": s} for c, s in self.loser_causes], "runs": self.runs}


def idle_shares(figures: dict[str, Any]) -> dict[str, float]:
    """Idle seconds by cause summed over stages, as a share of P x makespan."""
    total = (figures["makespan_s"] or 0.0) * len(figures["idle_causes_s"])    # None: nothing completed
    return {c: sum(st[c] for st in figures["idle_causes_s"]) / total if total else 0.0 for c in CAUSES}


def recompute_share(figures: dict[str, Any]) -> float:
    """The largest stage's busy time on chunks a late fallback threw away, as a share of the makespan."""
    makespan = figures["makespan_s"] or 0.0
    return max(figures["recompute_s"], default=0.0) / makespan if makespan else 0.0


def run_setting(spec: GridSpec, setting: Setting) -> GridRow:
    """Every policy on one setting (runs in a worker process when ``jobs > 1``)."""
    from wavepp.runtime.bench.runs import BenchConfig, run_one
    from wavepp.runtime.engines.config import SimConfig
    from wavepp.runtime.engines.sim.engine import SimEngine
    from wavepp.runtime.sources.workloads import parse_workload

    model, workload, concurrency = setting.model, setting.workload, setting.concurrency
    engine = SimEngine(SimConfig(model, spec.hardware, spec.pp, kv_blocks=setting.kv_blocks,
                                 perf_dir=spec.perf_dir, host_work_scale=spec.host_scale))
    spec_w = parse_workload(workload)
    requests = setting.requests or spec.requests or (None if spec_w.kind == "trace" else max(512, 4 * concurrency))
    cfg = BenchConfig(spec_w, [concurrency], spec.all_policies, requests, spec.seed, setting.prompt_tokens,
                      knobs=engine.default_knobs(), model_name=model, hardware_name=spec.hardware, keep_spans=False)
    row = GridRow(model, setting.label or workload, concurrency, subject=spec.policies[0], variants=list(spec.variants))
    for policy in spec.all_policies:
        f = run_one(engine, cfg, policy, concurrency).figures.as_dict()
        row.runs[policy] = {k: f[k] for k in KEPT} | {"idle_shares": idle_shares(f),
                                                      "recompute_share": recompute_share(f)}
    rate = {p: r["input_tokens_per_s"] or 0.0 for p, r in row.runs.items()}    # None: nothing completed
    baselines = list(spec.policies[1:])
    if baselines:
        row.best_baseline = max(baselines, key=lambda p: rate[p])
        best = rate[row.best_baseline]
        row.ratio = rate[row.subject] / best if best else 0.0
        loser = row.subject if row.ratio < 1 else row.best_baseline
        shares = row.runs[loser]["idle_shares"]
        row.loser_causes = sorted(((c, s) for c, s in shares.items() if s > 0), key=lambda x: -x[1])[:2]
    return row


def run_grid(spec: GridSpec, jobs: int = 1,
             progress: Callable[[int, int], None] | None = None) -> list[GridRow]:
    """Every setting of ``spec``, in the grid's order; ``progress(done, total)`` after each."""
    settings = spec.settings()
    rows: dict[tuple[str, str, int], GridRow] = {}
    if jobs <= 1:
        for i, setting in enumerate(settings, 1):
            rows[setting.key] = run_setting(spec, setting)
            if progress:
                progress(i, len(settings))
    else:
        with ProcessPoolExecutor(max_workers=jobs, mp_context=get_context("spawn")) as pool:
            futures = {pool.submit(run_setting, spec, setting): setting.key for setting in settings}
            for i, fut in enumerate(as_completed(futures), 1):
                rows[futures[fut]] = fut.result()
                if progress:
                    progress(i, len(settings))
    return [rows[s.key] for s in settings]


def summary(rows: Sequence[GridRow]) -> str:
    """``wins N/M, min ratio R, c=128 suffix4k: glm-5.2 Q1, minimax-m2.7 Q2`` (the paper grid), plus the
    runs that stalled and, with variants, each variant's ratio to the subject (min-max)."""
    scored = [r for r in rows if r.best_baseline]
    if not scored:
        return "no baseline to compare with"
    wins = sum(r.ratio >= 1.0 for r in scored)
    worst = min(scored, key=lambda r: r.ratio)
    line = (f"wins {wins}/{len(scored)}, min ratio {worst.ratio:.3f} "
            f"({worst.model} {worst.workload} c={worst.concurrency})")
    if min(r.concurrency for r in scored) < 8:
        high = [r for r in scored if r.concurrency >= 8]
        line += f"; at c >= 8: wins {sum(r.ratio >= 1.0 for r in high)}/{len(high)}"
    top = max(r.concurrency for r in scored)
    headline = [r for r in scored if r.concurrency == top and r.workload in ("suffix4k", "suffix:4096")]
    if headline:
        line += f", c={top} suffix4k: " + ", ".join(f"{r.model} {r.ratio:.3f}" for r in headline)
    stalled: dict[str, int] = {}
    for r in rows:
        for p, f in r.runs.items():
            if f.get("stalled"):
                stalled[p] = stalled.get(p, 0) + 1
    if stalled:
        line += "; stalled: " + ", ".join(f"{p} {n}/{len(rows)}" for p, n in stalled.items())
    for variant in rows[0].variants:
        ratios = [variant_ratio(r, variant) for r in rows]
        known = [x for x in ratios if x is not None]
        if known:
            line += f"; {variant} / {rows[0].subject} {min(known):.3f}-{max(known):.3f}"
    return line


def variant_ratio(row: GridRow, variant: str) -> float | None:
    mine, subject = row.runs[variant]["input_tokens_per_s"], row.runs[row.subject]["input_tokens_per_s"]
    return mine / subject if mine is not None and subject else None


def to_markdown(rows: Sequence[GridRow], spec: GridSpec) -> str:
    policies = spec.all_policies
    head = ["model", "workload", "c"] + [f"{p} in/computed tok/s (eff, p50/p95 s)" for p in policies] + [
        f"{policies[0]} / best", "loser's top idle causes"]
    lines = [f"# wavepp grid ({spec.name}): {spec.hardware}, PP{spec.pp}", "", summary(rows), "",
             "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [r.model, r.workload, str(r.concurrency)]
        for p in policies:
            f = r.runs[p]
            cells.append(f"{fmt(f['input_tokens_per_s'], ',.0f')}/{fmt(f['computed_tokens_per_s'], ',.0f')} "
                         f"({fmt(f['pipeline_efficiency'], '.3f')}, "
                         f"{fmt(f['prefill_latency_p50_s'], '.2f')}/{fmt(f['prefill_latency_p95_s'], '.2f')})"
                         + (" **stalled**" if f.get("stalled") else ""))
        cells.append(f"{r.ratio:.3f}" if r.best_baseline else "-")
        cells.append(", ".join(f"{c} {s:.1%}" for c, s in r.loser_causes) or "-")
        lines.append("| " + " | ".join(cells) + " |")
    detail = ["model", "workload", "c", "policy", "good hit", "in flight", "fallbacks", "recompute",
              "evictions per stage", "completed", "stalled"]
    lines += ["", "## Reuse under pressure", "", "| " + " | ".join(detail) + " |", "|" + "---|" * len(detail)]
    for r in rows:
        for p in policies:
            f = r.runs[p]
            lines.append("| " + " | ".join([
                r.model, r.workload, str(r.concurrency), p, fmt(f.get("good_hit_rate"), ".3f"),
                fmt(f.get("sharing_in_flight"), ".3f"),
                str(f.get("fallbacks", 0)), f"{f.get('recompute_share', 0.0):.1%}",
                "/".join(f"{e:,}" for e in f.get("evictions", [])), str(f["completed"]),
                (f.get("stalled") or "-")[:80]]) + " |")
    return "\n".join(lines) + "\n"
