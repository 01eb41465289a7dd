"""Throughput and latency: tokens per second and prefill latency percentiles over time."""

from __future__ import annotations

import numpy as np
import pandas as pd
import streamlit as st

from wavepp.dashboard import charts
from wavepp.dashboard.frames import min_samples, percentiles_by_bin, request_waterfall
from wavepp.dashboard.screens.common import metric, no_data
from wavepp.dashboard.view import View
from wavepp.runtime.control.knobs import echo

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
        if view.samples_note:
            st.caption(view.samples_note)
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
    st.plotly_chart(charts.lines(rate, "t", "tokens/s", "series", "throughput (dashed: the mean over the run)",
                                 fr.knob_marks, "tokens/s", means=True), key="rate")
    st.caption(f"{BINS} bins of {width:.3f} s: input tok/s counts a request's prompt when it completes, computed "
               "tok/s the tokens stage 0 executed")
    lat, bins = latency_percentiles(done, end)
    drawn = sorted(set(lat.dropna()["percentile"]), key=lambda p: float(p[1:]))
    st.plotly_chart(charts.lines(lat, "t", "value", "percentile",
                                 f"prefill latency (TTFT) {' / '.join(drawn) or 'percentiles'} over time "
                                 "(by completion time)", fr.knob_marks, "TTFT (s)", markers=True), key="latency")
    st.caption("; ".join(f"p{q:g}: {n} bins of {end / n:.3f} s" if n else
                         f"p{q:g} not drawn: {len(done)} completions, a bin needs {min_samples(q)}"
                         for q, n in bins.items())
               + " - each percentile in the widest bins that hold enough completions for it; lines break where "
                 "a bin holds fewer")
    _drill_down(view)


def latency_percentiles(done: pd.DataFrame, end: float, qs: tuple[float, ...] = (50, 95, 99)
                        ) -> tuple[pd.DataFrame, dict[float, int]]:
    """TTFT percentiles over completion time, each in as many bins (up to BINS) as hold
    ``min_samples(q)`` completions on average: p99 in fewer, wider bins than p50, but drawn wherever
    the run has the completions for it. Returns the curves and each percentile's bin count (0: none)."""
    frames, bins = [], {}
    for q in qs:
        n = min(BINS, len(done) // min_samples(q))
        bins[q] = n
        if n:
            frames.append(percentiles_by_bin(done["done"], done["latency"], np.linspace(0, end, n + 1).tolist(), (q,)))
    lat = pd.concat(frames) if frames else pd.DataFrame(columns=["t", "percentile", "value"])
    return lat, bins


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
