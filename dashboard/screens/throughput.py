"""Throughput and latency: tokens per second and prefill latency percentiles over time."""

from __future__ import annotations

import numpy as np
import pandas as pd
import streamlit as st

from dashboard import charts
from dashboard.screens.common import metric, no_data
from dashboard.view import View

BINS = 60


def render_throughput(view: View) -> None:
    st.header("Throughput and latency")
    if no_data(view):
        return
    fr, f = view.frames, view.figures
    if f is not None:
        c = st.columns(5)
        for col, key in zip(c, ("input_tokens_per_s", "computed_tokens_per_s", "prefill_latency_p50_s",
                                "prefill_latency_p95_s", "prefill_latency_p99_s"), strict=True):
            metric(col, f, key)
    done = fr.requests[~fr.requests["failed"]]
    end = max(fr.end, float(done["done"].max()) if len(done) else 0.0)
    if end <= 0:
        return
    edges = np.linspace(0, end, BINS + 1)
    width = edges[1] - edges[0]
    ex0 = fr.steps[(fr.steps["kind"] == "execute") & (fr.steps["stage"] == 0)]
    rate = pd.DataFrame({
        "t": edges[1:],
        "input tok/s": np.histogram(done["done"], edges, weights=done["input_tokens"])[0] / width,
        "computed tok/s": np.histogram(ex0["t1"], edges, weights=ex0["tokens"])[0] / width,
    }).melt("t", var_name="series", value_name="tokens/s")
    st.plotly_chart(charts.lines(rate, "t", "tokens/s", "series", "throughput", fr.knob_marks), key="rate")
    rows = []
    for lo, hi in zip(edges[:-1], edges[1:], strict=True):
        lat = done[(done["done"] > lo) & (done["done"] <= hi)]["latency"]
        if len(lat):
            for q in (50, 95, 99):
                rows.append({"t": hi, "percentile": f"p{q}", "latency": float(np.percentile(lat, q))})
    st.plotly_chart(charts.lines(pd.DataFrame(rows, columns=["t", "percentile", "latency"]), "t", "latency",
                                 "percentile", "prefill latency (by completion time)", fr.knob_marks, "s"),
                    key="latency")
