"""Admission: how steady admission is, what it costs, and what it waits for."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from wavepp.dashboard import charts
from wavepp.dashboard.screens.common import metric, no_data
from wavepp.dashboard.view import View


def render_admission(view: View) -> None:
    st.header("Admission")
    if no_data(view):
        return
    fr, f = view.frames, view.figures
    if f is not None:
        tiles = [("admission_interval_p50_s", f.admission_interval_p50_s),
                 ("admission_interval_p99_s", f.admission_interval_p99_s),
                 ("requests_per_round_mean", f.requests_per_round_mean),
                 ("admission_latency_p99_s", f.admission_latency_p99_s), ("fallbacks", f.fallbacks)]
        for col, (key, value) in zip(st.columns(5), tiles, strict=True):
            metric(col, key, value)
        if view.samples_note:
            st.caption(view.samples_note)
    admitting = fr.rounds[fr.rounds["admitted"] > 0].sort_values("t")
    gaps = pd.DataFrame({"t": admitting["t"].iloc[1:].to_numpy(),
                         "interval_ms": admitting["t"].diff().iloc[1:].to_numpy() * 1e3})
    if gaps.empty:
        st.info(f"Cadence needs two admission rounds that admitted something; this run has {len(admitting)}.")
    else:
        st.caption("cadence = intervals between admission rounds that admitted something")
        left, right = st.columns(2)
        fig = go.Figure(go.Scatter(x=gaps["t"], y=gaps["interval_ms"], mode="markers", marker_size=4))
        fig.update_layout(title="admission cadence over time (interval between admitting rounds)",
                          xaxis_title="time (s)", yaxis_title="ms", height=300)
        left.plotly_chart(charts.add_knob_marks(fig, fr.knob_marks), key="interval")
        hist = go.Figure(go.Histogram(x=gaps["interval_ms"], nbinsx=50))
        hist.update_layout(title="cadence histogram", xaxis_title="ms", yaxis_title="intervals", height=300)
        right.plotly_chart(hist, key="cadence")

    split = go.Figure()
    for phase in ("lookup", "lease", "escrow"):
        split.add_trace(go.Scatter(x=fr.rounds["t"], y=fr.rounds[f"{phase}_s"] * 1e3, stackgroup="one", name=phase))
    split.update_layout(title="admission round latency: lookup / lease / escrow", xaxis_title="time (s)",
                        yaxis_title="ms", height=300)
    st.plotly_chart(charts.add_knob_marks(split, fr.knob_marks), key="split")

    left, right = st.columns(2)
    budget = go.Figure(go.Scatter(x=fr.plans["t"], y=fr.plans["budget"], mode="lines", line_shape="hv",
                                  name="budget"))
    budget.add_trace(go.Scatter(x=fr.plans["t"], y=fr.plans["tokens"], mode="markers", marker_size=3,
                                name="tokens planned"))
    budget.update_layout(title="MPU wave budget", xaxis_title="time (s)", yaxis_title="tokens", height=300)
    left.plotly_chart(charts.add_knob_marks(budget, fr.knob_marks), key="budget")
    status = pd.DataFrame([{"t": fr.t(s.t), "waiting": s.waiting, "admitted": s.active,
                            "waves in flight": s.in_flight} for s in view.snap.status])
    if len(status):
        depth = status.melt("t", var_name="queue", value_name="depth")
        right.plotly_chart(charts.lines(depth, "t", "depth", "queue", "queue depths", fr.knob_marks,
                                        "requests / waves"), key="depths")
    else:
        right.info("No status snapshots (queue depths) in this source.")
    if len(fr.fallbacks):
        st.subheader("Fallbacks")
        st.dataframe(fr.fallbacks, hide_index=True)
