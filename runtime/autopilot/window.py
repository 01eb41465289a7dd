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
reuse-heavy mix to a cold one, a burst) clears by far. A closed loop's arrival rate is its completion
rate - the knobs move it (ring 1 -> 8 raised it 3.7x) - so it says nothing about the workload there; nor
does an open loop's in a window its concurrency cap held arrivals back (the runner passes ``open_loop``
false for that window).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from wavepp.runtime.figures.report import percentile
from wavepp.telemetry import names as N

Span = dict[str, Any]
SHIFT_RELATIVE = 0.25
SHIFT_REUSE = 0.15


@dataclass(frozen=True, slots=True)
class WorkloadStats:
    ended: int                   # requests that ended in the window (the statistics' sample)
    mean_prompt_tokens: float
    reuse_share: float
    arrival_rate: float          # requests/s
    open_loop: bool = True       # no arrival waited for a completion in the window (its rate is the workload's)

    def shift_from(self, before: WorkloadStats, rate: bool = True) -> str | None:
        """Which statistic moved past its threshold since ``before``, in words; None: none did.
        ``rate=False``: not the arrival rate (the window right after a knob change: where a concurrency
        cap binds, arrivals follow completions, and the change moved them)."""
        if not self.ended or not before.ended:
            return None
        moved = []
        for label, a, b in (("prompt mean", before.mean_prompt_tokens, self.mean_prompt_tokens),
                            ("arrival rate", before.arrival_rate, self.arrival_rate)):
            if label == "arrival rate" and not (rate and self.open_loop and before.open_loop):
                continue
            if a > 0 and abs(b - a) / a > SHIFT_RELATIVE:
                moved.append(f"{label} {a:,.4g} -> {b:,.4g}")
        if abs(self.reuse_share - before.reuse_share) > SHIFT_REUSE:
            moved.append(f"reuse share {before.reuse_share:.2f} -> {self.reuse_share:.2f}")
        return "; ".join(moved) or None

    def as_dict(self) -> dict[str, float]:
        return {"ended": self.ended, "prompt_mean": round(self.mean_prompt_tokens, 1),
                "reuse_share": round(self.reuse_share, 4), "arrival_rate": round(self.arrival_rate, 4)}


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
    ended = arrived = prompt = reusable = 0
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
            ended += 1
            prompt += tokens
            reusable += int(s["a"].get(N.REUSABLE_TOKENS, 0))
            arrived += s["t0"] >= t0_ns
    stats = WorkloadStats(ended, prompt / ended if ended else 0.0, reusable / prompt if prompt else 0.0,
                          arrived / seconds, open_loop)
    return WindowFigures(index, t0_ns, t1_ns, done_tokens / seconds, max(busy) / 1e9 / seconds,
                         percentile(latencies, 50), percentile(latencies, 99), len(latencies), failed, stats)
