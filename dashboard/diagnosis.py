"""The Pipeline page's reading: the bottleneck stage, *its own* cause, the stage it starves and the
knob that addresses that cause, with the change a one-click Preview tries. No Streamlit here.

The bottleneck is the busiest stage of the window: the pipeline runs at its pace, so every idle
instant on it is throughput lost. Its cause is therefore its own largest idle cause
(:mod:`runtime.figures.idle_causes`) when it idles a noticeable share of the window, and "busy computing"
when it hardly idles at all (then only a cheaper wave helps it). The stage it starves is the one it
feeds: the next stage, or, for the last stage, stage 0, whose wave slots it frees when it retires a wave.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pandas as pd

from wavepp.dashboard.frames import stage_idle
from wavepp.runtime.control.knobs import Knobs, int_range

BUSY = "busy"                # the bottleneck's cause when it idles less than IDLE_NOTICED of the window
IDLE_NOTICED = 0.02

# Per cause on the bottleneck: the knob that addresses it, the direction a preview tries ("up":
# doubled, "down": halved, "plus": one more) and why, in an operator's words.
KNOB_FOR: dict[str, tuple[str, str, str]] = {
    BUSY: ("max_wave_tokens", "up", "fewer, longer waves spend less of its time on per-wave transfer and "
                                    "preparation"),
    "ring_full": ("ring", "up", "more waves in flight give stage 0 a free wave slot sooner"),
    "no_work": ("max_leases", "up", "more admitted, unfinished requests give the planner work to plan (if no "
                                    "request is waiting, the load itself is the limit)"),
    "admission": ("max_round_requests", "up", "fewer, larger admission rounds on the critical path"),
    "fill": ("max_wave_tokens", "down", "smaller waves fill the pipeline sooner"),
    "drain": ("max_wave_tokens", "down", "smaller waves drain the pipeline sooner"),
    "previous_stage": ("fill_factor", "plus", "more ready waves, so it waits less for the stage before it"),
    "transfer": ("max_wave_tokens", "up", "fewer, longer waves cross the link fewer times"),
    "preparation": ("max_wave_tokens", "up", "fewer, longer waves are prepared fewer times"),
    "kv_capacity": ("max_leases", "down", "fewer leases hold KV, so a wave waits less for capacity"),
}


@dataclass(frozen=True, slots=True)
class Diagnosis:
    line: str                   # the reading, one paragraph
    bottleneck: int | None
    cause: str | None           # BUSY or one of runtime.figures.idle_causes.CAUSES
    knob: str | None            # the knob that addresses the cause (None: no knob does)
    direction: str | None       # "up" | "down" | "plus"


def _causes(shares: pd.DataFrame, stage: int, meaning: dict[str, str], k: int = 2) -> str:
    mine = shares[shares["stage"] == stage].sort_values("share", ascending=False).head(k)
    return ", ".join(f"{share:.1%} {meaning.get(cause, cause)}"
                     for cause, share in zip(mine["cause"], mine["share"], strict=True))


def diagnose(shares: pd.DataFrame, length: float, meaning: dict[str, str], num_stages: int,
             policy: str = "wavepp") -> Diagnosis:
    """The reading of a window of ``length`` seconds from its idle shares (:func:`frames.idle_shares`).
    ``policy``: the one running; a baseline's waves are sized by its static chunk, not the wave budget."""
    if num_stages < 1:
        return Diagnosis(f"No stage ran in the last {length:.3f} s.", None, None, None, None)
    idle = stage_idle(shares, num_stages)
    b = min(range(num_stages), key=lambda s: (idle[s], s))
    head = f"In the last {length:.3f} s, stage {b} is the bottleneck (busy {1 - idle[b]:.1%})"
    mine = shares[shares["stage"] == b].sort_values("share", ascending=False) if not shares.empty else shares
    if idle[b] < IDLE_NOTICED or mine.empty:
        cause = BUSY
        own = f"its cause: busy computing (idle only {idle[b]:.1%})"
    else:
        cause = str(mine["cause"].iloc[0])
        own = (f"its own cause: {meaning.get(cause, cause)} (idle {idle[b]:.1%}: "
               f"{_causes(shares, b, meaning)})")
    fed = b + 1 if b + 1 < num_stages else 0
    if fed == b:
        starves = "It feeds no other stage."
    else:
        # What of the fed stage's idle time waits on the bottleneck: a later stage waits for its wave
        # (or the wave crossing the link); stage 0 waits for a wave slot the last stage frees.
        waits_on = ("previous_stage", "transfer") if fed > b else ("ring_full",)
        mine = shares[(shares["stage"] == fed) & shares["cause"].isin(waits_on)] if not shares.empty else shares
        waited = float(mine["share"].sum()) if not mine.empty else 0.0
        why = _causes(shares, fed, meaning)
        idle_of = f"idle {idle[fed]:.1%}{': ' + why if why else ''}"
        starves = (f"It starves stage {fed}, which waits on it {waited:.1%} of the window ({idle_of})."
                   if waited > 0 else f"It starves no stage: stage {fed}, which it feeds, never waits on it "
                                      f"({idle_of}).")
    knob, direction, reason = KNOB_FOR.get(cause, (None, None, None))
    if knob == "max_wave_tokens" and not policy.startswith("wavepp"):
        knob = "static_chunk_tokens"
    if knob is None:
        advice = "No knob addresses this cause."
    else:
        arrow = {"up": "raise", "down": "lower", "plus": "raise"}[direction or "up"]
        advice = f"Knob: {arrow} {knob} - {reason}."
    return Diagnosis(f"{head}; {own}. {starves} {advice}", b, cause, knob, direction)


def effective(knob: str, current: Knobs, num_stages: int) -> int:
    """A knob's value as the runtime uses it: ring 0 is the policy's default, 2P for wavepp, P otherwise."""
    value = int(getattr(current, knob))
    if knob == "ring" and value == 0:
        value = (2 if current.policy.startswith("wavepp") else 1) * max(num_stages, 1)
    return value


def proposal(knob: str, direction: str, current: Knobs, num_stages: int, block: int = 64) -> dict[str, Any]:
    """The change a one-click preview tries: ``knob`` moved once in ``direction`` from ``current``
    (token budgets stay whole blocks and ``min_wave_tokens <= max_wave_tokens``)."""
    value = effective(knob, current, num_stages)
    lo, hi = int_range(knob)
    if direction in ("plus", "up"):
        return {knob: min(hi, value + 1 if direction == "plus" else value * 2)}
    new = max(lo, value // 2)
    if knob in ("max_wave_tokens", "min_wave_tokens", "static_chunk_tokens"):
        new = max(block, new // block * block)
    out = {knob: new}
    if knob == "max_wave_tokens" and current.min_wave_tokens > new:
        out["min_wave_tokens"] = new
    return out
