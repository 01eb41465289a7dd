"""Throughput and latency: tokens per second and prefill latency percentiles over time."""

from __future__ import annotations

import numpy as np
import pandas as pd
import streamlit as st

from dashboard import charts
from dashboard.frames import min_samples, percentiles_by_bin
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
    # Fewer, wider bins than the throughput chart: a percentile needs samples (min_samples) to stand on.
    bins = max(1, min(BINS, len(done) // min_samples(95)))
    lat = percentiles_by_bin(done["done"], done["latency"], np.linspace(0, end, bins + 1).tolist())
    st.plotly_chart(charts.lines(lat, "t", "value", "percentile", "prefill latency (by completion time)",
                                 fr.knob_marks, "s"), key="latency")
    st.caption(f"{bins} bins of {end / bins:.3f} s; a percentile is drawn only where its bin holds enough "
               f"completions (p50 {min_samples(50)}, p95 {min_samples(95)}, p99 {min_samples(99)}); lines break "
               "where a bin holds fewer")
