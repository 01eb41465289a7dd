"""Throughput and latency: tokens per second and prefill latency percentiles over time."""

from __future__ import annotations

import numpy as np
import pandas as pd
import streamlit as st

from wavepp.dashboard import charts
from wavepp.dashboard.frames import min_samples, percentiles_by_bin, request_waterfall
from wavepp.dashboard.screens.common import metric, no_data
from wavepp.dashboard.view import View
from wavepp.runtime.knobs import echo

BINS = 60


def render_throughput(view: View) -> None:
    st.header("Throughput and latency")
    if no_data(view):
        return
    fr, f = view.frames, view.figures
    if f is not None:
        tiles = [("input_tokens_per_s", f.input_tokens_per_s), ("computed_tokens_per_s", f.computed_tokens_per_s),
                 ("prefill_latency_p50_s", f.prefill_latency_p50_s), ("prefill_latency_p95_s", f.prefill_latency_p95_s),
                 ("prefill_latency_p99_s", f.prefill_latency_p99_s)]
        for col, (key, value) in zip(st.columns(5), tiles, strict=True):
            metric(col, key, value)
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
    st.plotly_chart(charts.lines(lat, "t", "value", "percentile",
                                 "prefill latency (TTFT) p50 / p95 / p99 over time (by completion time)",
                                 fr.knob_marks, "s"), key="latency")
    st.caption(f"{bins} bins of {end / bins:.3f} s; a percentile is drawn only where its bin holds enough "
               f"completions (p50 {min_samples(50)}, p95 {min_samples(95)}, p99 {min_samples(99)}); lines break "
               "where a bin holds fewer")
    _drill_down(view)


def _drill_down(view: View) -> None:
    """Pick a request: its admission round (lookup / lease / escrow), its chunks on each stage, its
    reuse boundary and outcome, as a small waterfall."""
    fr = view.frames
    st.subheader("Request drill-down")
    slowest = fr.requests.nlargest(3, "latency")["id"].tolist()
    hint = f" (slowest: {', '.join(slowest)})" if slowest else ""
    rid = st.text_input(f"Request id{hint}", key="drill_request").strip()
    if not rid:
        return
    rows = request_waterfall(fr, rid)
    if rows is None:
        example = fr.requests["id"].iloc[0] if len(fr.requests) else "none yet"
        st.warning(f"No request {echo(rid)} in this run ({len(fr.requests)} requests; ids look like {example}).")
        return
    req = fr.requests[fr.requests["id"] == rid].iloc[0]
    outcome = "failed" if req["failed"] else f"completed, prefill latency {req['latency']:.4f} s"
    cached = min(int(req["reused"]), int(req["reusable"]))     # both prefixes: the cache's part is the smaller
    reuse = (f"reuse boundary: {int(req['reused']):,} of {int(req['input_tokens']):,} prompt tokens reused - "
             f"{cached:,} from the cache ({int(req['reusable']):,} reusable when it arrived), "
             f"{int(req['reused']) - cached:,} shared in flight")
    if req["follows"]:                          # its lease reached through blocks the producer was computing
        reuse += f", following {echo(str(req['follows']))}"
    lowered = f", lowered by {int(req['fallbacks'])} fallback(s)" if req["fallbacks"] else ""
    waves = rows[rows["row"].str.startswith("stage ")]["detail"].str.extract(r"wave (\d+)")[0].nunique()
    st.markdown(f"**{rid}**: {outcome}; {reuse}{lowered}; carried by {waves} wave(s).")
    st.plotly_chart(charts.waterfall(rows, fr.num_stages), key="waterfall")
