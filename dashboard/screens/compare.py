"""Compare: two saved runs side by side (e.g. wavepp vs trtllm-pp from one bench)."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from dashboard import charts
from dashboard.frames import build
from dashboard.view import View
from runtime.runfile import SavedRun, load_runs

FIELDS = ["input_tokens_per_s", "computed_tokens_per_s", "pipeline_efficiency", "makespan_s",
          "admission_interval_p50_s", "admission_interval_p99_s", "admission_latency_p99_s",
          "prefill_latency_p50_s", "prefill_latency_p95_s", "good_hit_rate", "fallbacks", "waves"]


def render_compare(view: View) -> None:
    st.header("Compare")
    runs = list(view.source.runs())
    extra = st.text_input("Another saved run file (optional)", key="compare_file")
    if extra:
        try:
            runs += load_runs(extra)
        except ValueError as exc:
            st.error(str(exc))
    if len(runs) < 2:
        st.info("Compare needs two saved runs: start the dashboard with --run FILE from "
                "`wavepp bench --policy wavepp,trtllm-pp --save-run FILE`, or add a second file above.")
        return
    labels = [r.label for r in runs]
    left, right = st.columns(2)
    a = left.selectbox("Run A", labels, index=0, key="compare_a")
    b = right.selectbox("Run B", labels, index=1, key="compare_b")
    ra, rb = (next(r for r in runs if r.label == x) for x in (a, b))
    table = pd.DataFrame({"figure": FIELDS, a: [ra.figures.get(k) for k in FIELDS],
                          b + " ": [rb.figures.get(k) for k in FIELDS]})
    st.dataframe(table, hide_index=True)
    ratio = (ra.figures["input_tokens_per_s"] / rb.figures["input_tokens_per_s"]
             if rb.figures.get("input_tokens_per_s") else float("nan"))
    st.metric(f"throughput {a} / {b}", f"{ratio:.3f}x")
    st.plotly_chart(_bubbles(ra, rb), key="compare_bubbles")
    for col, run, key in ((left, ra, "a"), (right, rb, "b")):
        col.caption(run.label)
        col.plotly_chart(charts.history(build(run.spans, int(run.meta.get("pp", 0)) or None)), key=f"hist_{key}")


def _bubbles(ra: SavedRun, rb: SavedRun) -> go.Figure:
    fig = go.Figure()
    for run in (ra, rb):
        fracs = run.figures.get("bubble_fraction", [])
        fig.add_trace(go.Bar(x=[f"stage {i}" for i in range(len(fracs))], y=fracs, name=run.label))
    fig.update_layout(title="bubble fraction per stage", barmode="group", height=300, yaxis_title="fraction")
    return fig
