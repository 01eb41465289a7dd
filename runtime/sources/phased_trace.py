"""A phased trace: the workload shifts mid-run, as a deployment's does over a day - short prompts that
share a few system prompts, then long documents asked about again and again, then long cold prompts -
with the arrival rate stepping between phases. Written in the Mooncake format (``../shared/data/traces``:
one JSON object a line, ``timestamp`` in ms, ``input_length``, ``output_length``, ``hash_ids`` one per
512-token block), so ``--workload trace:PATH``, ``wavepp serve`` clients (aiperf's trace replay) and the
autopilot's benchmark all replay the same file.

Each phase: ``requests`` Poisson arrivals at ``rate`` requests/s, prompts of one shape:

* ``groups`` - ``shared`` system prompts, each ``prefix`` of the typical ``tokens``; a request is one of them
  (uniformly) and a new suffix: ``reuse90``'s shape;
* ``docs``   - ``shared`` documents of ``tokens`` x [0.5, 1.5] each, drawn uniformly, and a new question of
  ``question`` tokens (:data:`QUESTION_TOKENS`);
* ``cold``   - every prompt new, ``tokens`` x [0.75, 1.25].
"""

from __future__ import annotations

import itertools
import json
import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from wavepp.runtime.request import cdiv
from wavepp.runtime.sources.trace_file import TRACE_BLOCK_TOKENS

QUESTION_TOKENS = 2048
KINDS = ("groups", "docs", "cold")


@dataclass(frozen=True, slots=True)
class Phase:
    name: str
    kind: str                # groups | docs | cold
    requests: int
    rate: float              # requests/s
    tokens: int              # the typical prompt (groups, cold) or document (docs) length
    shared: int = 0          # groups: system prompts; docs: documents
    prefix: float = 0.9      # groups: the shared prompt's share of a prompt
    question: int = QUESTION_TOKENS   # docs: the new tokens after the document

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"phase {self.name!r}: kind must be one of {', '.join(KINDS)}, got {self.kind!r}")
        if self.requests < 1 or not self.rate > 0 or self.tokens < TRACE_BLOCK_TOKENS:
            raise ValueError(f"phase {self.name!r}: needs requests >= 1, rate > 0 and tokens >= {TRACE_BLOCK_TOKENS}")
        if self.question < 1:
            raise ValueError(f"phase {self.name!r}: a question needs at least one token, got {self.question}")
        if self.kind != "cold" and self.shared < 1:
            raise ValueError(f"phase {self.name!r}: a {self.kind} phase needs shared >= 1")

    @property
    def longest_prompt(self) -> int:
        """The longest prompt this phase can draw (its shapes' upper bounds), in tokens."""
        if self.kind == "groups":
            prefix = int(self.tokens * self.prefix) // TRACE_BLOCK_TOKENS * TRACE_BLOCK_TOKENS
            return prefix + int(self.tokens * (1 - self.prefix) * 1.25)
        if self.kind == "docs":
            return int(self.tokens * 1.5) // TRACE_BLOCK_TOKENS * TRACE_BLOCK_TOKENS + self.question
        return int(self.tokens * 1.25)


def check_context(phases: Sequence[Phase], max_context: int) -> None:
    """ValueError naming each phase whose prompts can exceed the model's context (a replay would refuse
    them at arrival): size a phase to the model it runs on."""
    long = [f"{p.name} (up to {p.longest_prompt:,} tokens)" for p in phases if p.longest_prompt > max_context]
    if long:
        raise ValueError(f"phases longer than the model's context of {max_context:,} tokens: {', '.join(long)}")


#: the autopilot benchmark's phases (scripts/bench_autopilot.py), for the simulated GLM-5.2 on B300, PP4, at
#: most 32 requests outstanding. The default knobs serve each shape alone (a phase of one shape arriving at
#: 1,000 requests/s) at 56 chat, 11.7 docs and 1.48 cold requests/s (measured); each phase arrives faster than
#: that, so the cap binds throughout and a phase's throughput is what the knobs make of it. (Below capacity a
#: phase's throughput is its arrival rate, and the backlog a slower setting carries into the next phase
#: inflates that phase's: measured, a docs phase at 6 requests/s read 22 % faster under a setting 11 % slower.)
DEFAULT_PHASES = (
    Phase("chat", "groups", 4800, 80.0, 4096, shared=16),
    Phase("docs", "docs", 1200, 20.0, 98304, shared=8),
    Phase("cold", "cold", 300, 3.0, 32768),
)


def rows(phases: Sequence[Phase], seed: int = 0) -> Iterator[dict[str, object]]:
    """The trace's lines, in arrival order."""
    rng = random.Random(seed)
    fresh = itertools.count()
    t = 0.0

    def blocks(n_tokens: int) -> list[int]:
        return [next(fresh) for _ in range(cdiv(n_tokens, TRACE_BLOCK_TOKENS))]

    for phase in phases:
        if phase.kind == "groups":
            prefix_tokens = int(phase.tokens * phase.prefix) // TRACE_BLOCK_TOKENS * TRACE_BLOCK_TOKENS
            shared = [blocks(prefix_tokens) for _ in range(phase.shared)]
        elif phase.kind == "docs":
            lengths = [int(phase.tokens * rng.uniform(0.5, 1.5)) // TRACE_BLOCK_TOKENS * TRACE_BLOCK_TOKENS
                       for _ in range(phase.shared)]
            shared = [blocks(n) for n in lengths]
        for _ in range(phase.requests):
            t += rng.expovariate(phase.rate)
            if phase.kind == "cold":
                n = int(phase.tokens * rng.uniform(0.75, 1.25))
                ids = blocks(n)
            else:
                base = rng.choice(shared)
                extra = phase.question if phase.kind == "docs" else \
                    int(phase.tokens * (1 - phase.prefix) * rng.uniform(0.75, 1.25))
                n = len(base) * TRACE_BLOCK_TOKENS + extra
                ids = base + blocks(extra)
            yield {"timestamp": round(t * 1000, 3), "input_length": n, "output_length": 1, "hash_ids": ids}


def write(path: str | Path, phases: Sequence[Phase] = DEFAULT_PHASES, seed: int = 0,
          max_context: int | None = None) -> list[tuple[str, int, int]]:
    """Write the trace; returns each phase's (name, first line, last line), lines counted from 1.
    ``max_context``: the model's (:func:`check_context` first)."""
    if max_context is not None:
        check_context(phases, max_context)
    Path(path).write_text("".join(json.dumps(r, separators=(",", ":")) + "\n" for r in rows(phases, seed)))
    out, first = [], 1
    for p in phases:
        out.append((p.name, first, first + p.requests - 1))
        first += p.requests
    return out


@dataclass(frozen=True, slots=True)
class PhaseFigures:
    name: str
    completed: int
    input_tokens_per_s: float | None     # its completed requests' prompt tokens / first arrival -> last completion
    prefill_p99_s: float | None          # prefill latency (a prefill server's TTFT) p99 of its requests


def phase_figures(spans: Sequence[dict[str, Any]], phases: Sequence[tuple[str, int, int]]) -> list[PhaseFigures]:
    """Each phase's figures from a replay's request spans (a trace request's id names its line: ``t000123``)."""
    from wavepp.runtime.figures.report import percentile
    from wavepp.telemetry import names as N
    by_line: dict[int, dict[str, Any]] = {}
    for s in spans:
        rid = str(s["a"].get(N.REQUEST_ID, "")) if s["n"] == N.REQUEST else ""
        if rid.startswith("t") and rid[1:].isdigit():
            by_line[int(rid[1:])] = s
    out = []
    for name, first, last in phases:
        done = [s for line, s in by_line.items() if first <= line <= last and "err" not in s]
        if not done:
            out.append(PhaseFigures(name, 0, None, None))
            continue
        t0, t1 = min(s["t0"] for s in done), max(s["t1"] for s in done)
        tokens = sum(int(s["a"].get(N.GEN_AI_INPUT_TOKENS, 0)) for s in done)
        latencies = [(s["t1"] - s["t0"]) / 1e9 for s in done]
        out.append(PhaseFigures(name, len(done), tokens / ((t1 - t0) / 1e9) if t1 > t0 else None,
                                percentile(latencies, 99)))
    return out
