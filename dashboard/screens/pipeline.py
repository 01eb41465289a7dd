"""Pipeline: when each stage is busy and when it waits - over the whole run and over a window."""

from __future__ import annotations

import dataclasses
from typing import Any

import streamlit as st

from wavepp.dashboard import charts
from wavepp.dashboard.diagnosis import Diagnosis, diagnose, effective, proposal
from wavepp.dashboard.frames import Frames, busy_over_time, idle_shares, idle_window, stage_idle
from wavepp.dashboard.screens import whatif
from wavepp.dashboard.screens.common import no_data
from wavepp.dashboard.screens.knobs import current_knobs
from wavepp.dashboard.view import View
from wavepp.runtime.control.knobs import Knobs
from wavepp.runtime.figures.idle_causes import MEANING

DETAIL_WAVES = 48       # the detail view opens on about this many recent waves (SVG bars stay quick)


def default_window(fr: Frames) -> float:
    ex = fr.steps[fr.steps["kind"] == "execute"]["t0"].sort_values()
    if ex.empty:
        return 0.05
    start = float(ex.iloc[max(0, len(ex) - DETAIL_WAVES * max(fr.num_stages, 1))])
    return max(fr.end - start, 0.002)


def render_pipeline(view: View) -> None:
    st.header("Pipeline")
    if no_data(view):
        return
    fr, f = view.frames, view.figures
    end = fr.end
    run = max(end - fr.start, 0.002)                      # the whole run: first arrival -> last completion
    # The reading goes first on the page but follows the window the slider below picks: its place is
    # kept here and filled once the slider has given the window every figure of the page then uses.
    top = st.container()
    if f is not None and f.bubble_fraction is not None:   # the bench's own figures; None: nothing completed yet
        cols = st.columns(fr.num_stages + 1)
        # short labels (a tile truncates a long one): what they mean is in the caption below
        cols[0].metric(f"efficiency (run, {f.makespan_s:.3f} s)", f"{f.pipeline_efficiency:.3f}")
        for s, b in enumerate(f.bubble_fraction):
            cols[s + 1].metric(f"stage {s} bubble (run)", f"{b:.3f}")
        if f.makespan_s and any(f.recompute_s):        # busy but wasted: only where late fallbacks happened
            cols = st.columns(fr.num_stages + 1)
            cols[0].markdown("**Recomputation after late fallbacks** (busy, not idle: chunks a stage ran "
                             "for an attempt that a later fallback discarded)")
            for s, lost in enumerate(f.recompute_s):
                cols[s + 1].metric(f"stage {s} recomputing (run)", f"{lost / f.makespan_s:.1%}")
    if float(st.session_state.get("pipeline_window", 0.0)) > run:   # another run, shorter than the last one
        st.session_state["pipeline_window"] = run
    window = float(st.slider(
        "Detail window (s): the last seconds of the run the reading above, the tiles below, the lanes, the "
        "idle causes and the busy-fraction chart show", min_value=0.001, max_value=run,
        value=min(default_window(fr), run), step=run / 1000, key="pipeline_window", format="%.4f"))
    idle = idle_window(view.idle, fr.origin_ns, max(0.0, end - window), end, live=view.running)
    shares = idle_shares(idle, fr.num_stages, window)
    meta = view.source.run_meta(view.snap)
    current, block = current_knobs(view, meta)
    diagnosis = diagnose(shares, window, MEANING, fr.num_stages, current.policy)
    with top:
        st.markdown(f"**Why the bubbles:** {diagnosis.line}")
        preview_button(view, diagnosis, meta, current, block)
    bubbles = stage_idle(shares, fr.num_stages)
    cols = st.columns(fr.num_stages + 1)
    cols[0].metric(f"efficiency (last {window:.3f} s)", f"{1 - min(bubbles, default=1.0):.3f}")
    for s, b in enumerate(bubbles):
        cols[s + 1].metric(f"stage {s} bubble (last {window:.3f} s)", f"{b:.3f}")
    st.caption("bubble = bubble fraction, the share of the time a stage was not executing (the sum of its idle "
               "causes below); efficiency = pipeline efficiency, the busiest stage's busy share (1.0 = no bubble "
               "on it); run = the whole run, first arrival to last completion"
               + ("; live, the time since a stage's last finished step is not counted: it may be computing"
                  if view.running else ""))
    st.plotly_chart(charts.timeline(fr, max(0.0, end - window), end, idle), key="timeline")
    st.plotly_chart(charts.idle_bars(shares, fr.num_stages, window), key="idle_causes")
    st.subheader("Whole run")
    st.plotly_chart(charts.history(fr), key="history")
    st.subheader(f"Busy fraction over a sliding window of {window:.3f} s")
    over = busy_over_time(fr.steps, fr.num_stages, window, end=end)
    st.plotly_chart(charts.lines(over, "t", "busy", "stage", marks=fr.knob_marks, y_title="busy fraction"),
                    key="busy")


def preview_button(view: View, diagnosis: Diagnosis, meta: dict[str, Any], current: Knobs, block: int) -> None:
    """One click: a Preview (the Knobs page's what-if) of the reading's knob moved in its direction,
    from the ``current`` knobs; its progress and result are drawn here, as on the Knobs page."""
    if diagnosis.knob is None or diagnosis.direction is None:
        return
    changes = proposal(diagnosis.knob, diagnosis.direction, current, view.frames.num_stages, block)
    what = ", ".join(f"{k} {effective(k, current, view.frames.num_stages)} → {v}" for k, v in changes.items())
    if st.button(f"Preview {what}", key="pipeline_preview", disabled=whatif.running()):
        whatif.start_preview(view, meta, whatif.default_settings(), current, dataclasses.replace(current, **changes))
    whatif.results(view)
