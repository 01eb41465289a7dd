"""Small helpers the pages share."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import streamlit as st

from wavepp.dashboard.sources import Snapshot
from wavepp.dashboard.view import View
from wavepp.store.records import StatusSnapshot

SILENT_AFTER_S = 5.0        # a running runtime writes a status record every 0.25 s


@dataclass(frozen=True, slots=True)
class Figure:
    """How a figure of the run reads on every page and in Compare: one name, unit and precision."""

    name: str
    unit: str = ""
    scale: float = 1.0
    digits: int = 3

    def format(self, value: Any) -> str:
        """"-" for a figure the run has not got (None: too short, nothing reusable)."""
        if value is None:
            return "-"
        text = f"{value * self.scale:,.{self.digits}f}"
        return f"{text} {self.unit}" if self.unit else text


FIGURES: dict[str, Figure] = {
    "input_tokens_per_s": Figure("input tok/s", digits=0),
    "computed_tokens_per_s": Figure("computed tok/s", digits=0),
    "pipeline_efficiency": Figure("pipeline efficiency (run)"),
    "makespan_s": Figure("makespan", "s"),
    "admission_interval_p50_s": Figure("cadence p50", "ms", 1e3, 2),
    "admission_interval_p99_s": Figure("cadence p99", "ms", 1e3, 2),
    "requests_per_round_mean": Figure("requests per round", digits=1),
    "admission_latency_p99_s": Figure("admission latency p99", "ms", 1e3, 2),
    "prefill_latency_p50_s": Figure("prefill p50", "s"),
    "prefill_latency_p95_s": Figure("prefill p95", "s"),
    "prefill_latency_p99_s": Figure("prefill p99", "s"),
    "good_hit_rate": Figure("good-hit rate"),
    "sharing_in_flight": Figure("sharing in flight"),
    "fallbacks": Figure("fallbacks", digits=0),
    "waves": Figure("waves", digits=0),
    "waves_per_s": Figure("waves per second", digits=1),
}


def metric(col: Any, key: str, value: float | None, label: str | None = None) -> None:
    """One tile: figure ``key``'s name (or ``label``) and ``value`` (read off the run's figures by
    the caller: ``f.good_hit_rate``) as every page shows it."""
    fig = FIGURES[key]
    col.metric(label or fig.name, fig.format(value))


def no_data(view: View, what: str = "spans") -> bool:
    """Show a clear note and return True when there is nothing to draw yet."""
    if view.empty:
        st.info(f"No {what} yet — waiting for the runtime." if view.snap.live else f"This run has no {what}.")
        return True
    return False


def span_age(snap: Snapshot) -> None:
    """Live views: how old the newest span on screen is (span end -> screen)."""
    if snap.live and snap.spans:
        newest = snap.spans[-1]["t1"]       # spans arrive in the order they end
        age = time.time() - newest / 1e9
        if abs(age) < 3600:                 # wall-clock runs only (virtual-time spans sit on a fixed epoch)
            st.caption(f"newest span ended {age:.2f} s before this render")


def _summary(status: StatusSnapshot) -> str:
    at = time.strftime("%H:%M:%S", time.localtime(status.wall)) if status.wall is not None else "?"
    return (f"last status at {at}: {status.finished} requests finished, {status.failed} failed, "
            f"{status.waiting} waiting, {status.active} admitted, {status.in_flight} waves in flight")


def runtime_banner(snap: Snapshot) -> None:
    """Live views: say when the runtime behind the view stopped - finished, failed, unreachable or
    silent - with its last status, instead of leaving the operator to read a growing span age."""
    last = snap.status[-1] if snap.status else None
    tail = f" — {_summary(last)}" if last else ""
    if snap.error:
        st.warning(snap.error + tail)
    elif last is None:
        return
    elif last.state == "finished":
        st.info(f"This run finished{tail}.")
    elif last.state.startswith("failed"):
        st.error(f"The runtime stopped: {last.state}{tail}.")
    elif last.wall is not None and time.time() - last.wall > SILENT_AFTER_S:
        st.warning(f"The runtime has not reported for {time.time() - last.wall:.0f} s: it stopped without a word "
                   f"or lost the store{tail}.")
