"""A window's figures, from the spans that ended in it: what the autopilot judges a setting by, and the
workload statistics it detects a shift with.

* input tok/s      = prompt tokens of the requests completed in the window / the window's length
* efficiency       = the busiest stage's execute time inside the window / the window's length
* TTFT p50 / p99   = prefill latency (arrival -> last chunk) of the requests completed in the window
* prompt mean      = mean prompt tokens of the requests that ended in the window (a request's span ends
                     when it does: one that arrived in the window and is still running says nothing yet,
                     and where a prefill outlasts the window none would)
* reuse share      = their reusable tokens (a completed request had computed them) / their prompt tokens
* arrival rate     = requests that arrived and ended in the window / its length

A shift (:meth:`WorkloadStats.shift_from`): the prompt mean or - in an open loop - the arrival rate
moved by more than :data:`SHIFT_RELATIVE` of the earlier value, or the reuse share by more than
:data:`SHIFT_REUSE` (absolute): thresholds a window-to-window wobble of a steady workload stays under
(measured on the sim: a few percent), and a change of phase (short chat turns to long documents, a
reuse-heavy mix to a cold one, a burst) clears by far. A move counts only when it is also past
:data:`SHIFT_Z` standard errors of the difference, each window's from its own sample: the prompts' spread
over the requests that ended, the reuse share's over the same requests (a ratio of sums, linearised), a
Poisson count's for the arrivals. Two windows of 15 arrivals at one steady rate differ by more than 25 %
about half the time; past the error the counts must differ by 3 x sqrt(15 + 15), about 16: sparse windows
say "no shift" until they could tell.

A closed loop's arrival rate is its completion rate - the knobs move it (ring 1 -> 8 raised it 3.7x) - so it
says nothing about the workload there; nor does an open loop's in a window its concurrency cap held
arrivals back (the runner passes ``open_loop`` false for that window).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from wavepp.runtime.figures.report import percentile
from wavepp.telemetry import names as N

Span = dict[str, Any]
SHIFT_RELATIVE = 0.25
SHIFT_REUSE = 0.15
SHIFT_Z = 3.0                    # standard errors of the difference a move must also clear


@dataclass(frozen=True, slots=True)
class WorkloadStats:
    ended: int                   # requests that ended in the window (the statistics' sample)
    mean_prompt_tokens: float
    reuse_share: float
    arrival_rate: float          # requests/s
    open_loop: bool = True       # no arrival waited for a completion in the window (its rate is the workload's)
    prompt_se: float = 0.0       # standard error of the prompt mean (inf: one request, no spread known)
    reuse_se: float = 0.0        # standard error of the reuse share
    seconds: float = 0.0         # the window's length: the arrival count's Poisson error (0: not known)

    def shift_from(self, before: WorkloadStats, rate: bool = True) -> str | None:
        """Which statistic moved past its threshold and its error since ``before``, in words; None: none did.
        ``rate=False``: not the arrival rate (the window right after a knob change: where a concurrency
        cap binds, arrivals follow completions, and the change moved them)."""
        if not self.ended or not before.ended:
            return None
        moved = []
        a, b = before.mean_prompt_tokens, self.mean_prompt_tokens
        if a > 0 and abs(b - a) / a > SHIFT_RELATIVE and _clears(b - a, before.prompt_se, self.prompt_se):
            moved.append(f"prompt mean {a:,.4g} -> {b:,.4g}")
        a, b = before.arrival_rate, self.arrival_rate
        if rate and self.open_loop and before.open_loop and a > 0 and abs(b - a) / a > SHIFT_RELATIVE \
                and _clears(b - a, before.rate_se, self.rate_se):
            moved.append(f"arrival rate {a:,.4g} -> {b:,.4g}")
        a, b = before.reuse_share, self.reuse_share
        if abs(b - a) > SHIFT_REUSE and _clears(b - a, before.reuse_se, self.reuse_se):
            moved.append(f"reuse share {a:.2f} -> {b:.2f}")
        return "; ".join(moved) or None

    @property
    def rate_se(self) -> float:
        """The arrival rate's standard error: a Poisson count's, ``sqrt(n) / seconds``."""
        return math.sqrt(self.arrival_rate / self.seconds) if self.seconds > 0 else 0.0

    def as_dict(self) -> dict[str, float | None]:
        return {"ended": self.ended, "prompt_mean": round(self.mean_prompt_tokens, 1),
                "reuse_share": round(self.reuse_share, 4), "arrival_rate": round(self.arrival_rate, 4),
                "prompt_se": round(self.prompt_se, 1) if math.isfinite(self.prompt_se) else None,
                "reuse_se": round(self.reuse_se, 4) if math.isfinite(self.reuse_se) else None}


def _clears(diff: float, se_before: float, se_after: float) -> bool:
    """Whether a difference of two windows' statistics is past :data:`SHIFT_Z` standard errors."""
    return abs(diff) > SHIFT_Z * math.hypot(se_before, se_after)


def _prompt_se(prompts: Sequence[int]) -> float:
    """Standard error of the mean prompt: the sample's spread over the square root of its size."""
    n = len(prompts)
    if n < 2:
        return math.inf if n else 0.0
    mean = sum(prompts) / n
    return math.sqrt(sum((p - mean) ** 2 for p in prompts) / (n - 1) / n)


def _share_se(reusable: Sequence[int], prompts: Sequence[int]) -> float:
    """Standard error of ``sum(reusable) / sum(prompts)`` (a ratio estimator, linearised: the residuals
    ``r - R p`` over the mean prompt)."""
    n, total = len(prompts), sum(prompts)
    if n < 2 or total <= 0:
        return math.inf if n == 1 else 0.0
    share, mean = sum(reusable) / total, total / n
    residual = sum((r - share * p) ** 2 for r, p in zip(reusable, prompts, strict=True)) / (n - 1)
    return math.sqrt(residual / n) / mean


@dataclass(frozen=True, slots=True)
class WindowFigures:
    index: int
    t0_ns: int
    t1_ns: int
    input_tps: float
    efficiency: float
    ttft_p50_s: float | None
    ttft_p99_s: float | None
    completed: int
    failed: int
    stats: WorkloadStats

    @property
    def seconds(self) -> float:
        return (self.t1_ns - self.t0_ns) / 1e9

    def as_dict(self) -> dict[str, Any]:
        return {"index": self.index, "seconds": round(self.seconds, 3), "input_tps": round(self.input_tps, 1),
                "efficiency": round(self.efficiency, 4), "ttft_p50_s": self.ttft_p50_s,
                "ttft_p99_s": self.ttft_p99_s, "completed": self.completed, "failed": self.failed,
                **self.stats.as_dict()}


def measure(spans: Sequence[Span], index: int, t0_ns: int, t1_ns: int, num_stages: int,
            open_loop: bool = True) -> WindowFigures:
    """The figures of ``[t0_ns, t1_ns)`` from ``spans`` (any spans; those outside are ignored)."""
    seconds = max(t1_ns - t0_ns, 1) / 1e9
    busy = [0] * max(num_stages, 1)
    done_tokens, latencies, failed = 0, [], 0
    arrived = 0
    prompts: list[int] = []
    reusables: list[int] = []
    for s in spans:
        t1 = s["t1"] or 0
        if s["n"] == N.EXECUTE:
            stage = int(s["a"].get(N.STAGE, 0))
            if 0 <= stage < len(busy):
                busy[stage] += max(0, min(t1, t1_ns) - max(s["t0"], t0_ns))
        elif s["n"] == N.REQUEST and t0_ns <= t1 < t1_ns:
            tokens = int(s["a"].get(N.GEN_AI_INPUT_TOKENS, 0))
            if "err" in s:
                failed += 1
            else:
                done_tokens += tokens
                latencies.append((t1 - s["t0"]) / 1e9)
            prompts.append(tokens)
            reusables.append(int(s["a"].get(N.REUSABLE_TOKENS, 0)))
            arrived += s["t0"] >= t0_ns
    ended, prompt = len(prompts), sum(prompts)
    stats = WorkloadStats(ended, prompt / ended if ended else 0.0, sum(reusables) / prompt if prompt else 0.0,
                          arrived / seconds, open_loop, _prompt_se(prompts), _share_se(reusables, prompts), seconds)
    return WindowFigures(index, t0_ns, t1_ns, done_tokens / seconds, max(busy) / 1e9 / seconds,
                         percentile(latencies, 50), percentile(latencies, 99), len(latencies), failed, stats)
