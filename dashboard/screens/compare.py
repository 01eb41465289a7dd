"""Compare: two saved runs side by side (e.g. wavepp vs trtllm-pp from one bench)."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from dashboard import charts
from dashboard.frames import build
from dashboard.screens.common import FIGURES
from dashboard.view import View
from runtime.runfile import SavedRun, load_runs

FIELDS = ["input_tokens_per_s", "computed_tokens_per_s", "pipeline_efficiency", "makespan_s",
          "admission_interval_p50_s", "admission_interval_p99_s", "requests_per_round_mean",
          "admission_latency_p99_s", "prefill_latency_p50_s", "prefill_latency_p95_s", "good_hit_rate",
          "fallbacks", "waves"]


def render_compare(view: View) -> None:
    st.header("Compare")
    # Runs are told apart by their place in this list (file, then run), never by label: two files
    # may well hold runs with the same label, or even the same file twice.
    runs = [(r, "this source") for r in view.source.runs()]
    extra = st.text_input("Another saved run file (optional)", key="compare_file")
    if extra:
        try:
            runs += [(r, extra) for r in load_runs(extra)]
        except ValueError as exc:
            st.error(str(exc))
    if len(runs) < 2:
        st.info("Compare needs two saved runs: start the dashboard with --run FILE from "
                "`wavepp bench --policy wavepp,trtllm-pp --save-run FILE`, or add a second file above.")
        return
    def name(i: int) -> str:
        run, where = runs[i]
        return f"{run.label} [{run.id}] ({where})"
    left, right = st.columns(2)
    a = left.selectbox("Run A", range(len(runs)), index=0, format_func=name, key="compare_a")
    b = right.selectbox("Run B", range(len(runs)), index=1, format_func=name, key="compare_b")
    ra, rb = runs[a][0], runs[b][0]
    table = pd.DataFrame({"figure": [FIGURES[k].name + (f" ({FIGURES[k].unit})" if FIGURES[k].unit else "")
                                     for k in FIELDS],
                          "Run A": [_value(ra, k) for k in FIELDS], "Run B": [_value(rb, k) for k in FIELDS]})
    st.dataframe(table, hide_index=True)
    ratio = (ra.figures["input_tokens_per_s"] / rb.figures["input_tokens_per_s"]
             if ra.figures.get("input_tokens_per_s") is not None and rb.figures.get("input_tokens_per_s")
             else float("nan"))
    st.metric("input throughput, Run A / Run B", f"{ratio:.3f}x")
    st.plotly_chart(_bubbles(ra, rb), key="compare_bubbles")
    for col, run, key in ((left, ra, "a"), (right, rb, "b")):
        col.caption(run.label)
        col.plotly_chart(charts.history(build(run.spans, int(run.meta.get("pp", 0)) or None)), key=f"hist_{key}")


def _value(run: SavedRun, key: str) -> str:
    """The figure as the pages show it, without its unit (the row names it)."""
    fig = FIGURES[key]
    return fig.format(run.figures.get(key)).removesuffix(f" {fig.unit}")


def _bubbles(ra: SavedRun, rb: SavedRun) -> go.Figure:
    fig = go.Figure()
    for which, run in (("Run A", ra), ("Run B", rb)):
        fracs = run.figures.get("bubble_fraction") or []     # null: the run completed nothing
        fig.add_trace(go.Bar(x=[f"stage {i}" for i in range(len(fracs))], y=fracs, name=which))
    fig.update_layout(title="bubble fraction per stage", barmode="group", height=300, yaxis_title="fraction")
    return fig
