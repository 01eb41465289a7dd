"""Cache: reuse actually obtained, residency per stage against capacity, pins held, evictions."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from wavepp.dashboard import charts
from wavepp.dashboard.screens.common import metric, no_data
from wavepp.dashboard.view import View


def render_cache(view: View) -> None:
    st.header("Cache")
    if no_data(view):
        return
    fr, f = view.frames, view.figures
    c = st.columns(5)
    if f is not None:
        metric(c[0], "good_hit_rate", f.good_hit_rate)
        metric(c[1], "sharing_in_flight", f.sharing_in_flight)
    done = fr.requests[~fr.requests["failed"]]
    cached = done[["reused", "reusable"]].min(axis=1)        # both prefixes: the cache's part is the smaller
    c[2].metric("reused from the cache (tokens)", f"{int(cached.sum()):,}")
    c[3].metric("reusable (tokens)", f"{int(done['reusable'].sum()):,}")
    c[4].metric("shared in flight (tokens)", f"{int((done['reused'] - cached).sum()):,}")
    st.caption("good-hit = reused tokens a completed request had computed when the request arrived / those "
               "reusable tokens (at most 1); sharing in flight = tokens taken from a request computing them at the "
               "same time / prompt tokens (docs/figures.md)")
    if not view.snap.status:
        st.info("No status snapshots (per-stage cache state) in this source.")
        return
    rows = [{"t": fr.t(s.t), "stage": f"stage {st_.stage}", "residency": st_.cached / max(st_.capacity, 1),
             "leases": st_.leases, "escrowed blocks": st_.escrowed, "evictions": st_.evictions}
            for s in view.snap.status for st_ in s.stages]
    df = pd.DataFrame(rows)
    st.plotly_chart(charts.lines(df, "t", "residency", "stage", "cached blocks / capacity", fr.knob_marks,
                                 "fraction of capacity"), key="residency")
    left, right = st.columns(2)
    left.plotly_chart(charts.lines(df, "t", "leases", "stage", "leases held", fr.knob_marks, "leases"), key="leases")
    right.plotly_chart(charts.lines(df, "t", "escrowed blocks", "stage", "escrowed blocks", fr.knob_marks,
                                    "blocks"), key="escrows")
    evictions = charts.lines(df, "t", "evictions", "stage", "evictions (cumulative)", fr.knob_marks, "blocks")
    evictions.update_yaxes(rangemode="nonnegative")        # a count: never an axis from -1 to 1
    st.plotly_chart(evictions, key="evictions")
    last = view.snap.status[-1]
    st.caption(f"Each stage's KV pool at the last status snapshot ({fr.t(last.t):.3f} s), in blocks of "
               f"{int(view.source.run_meta(view.snap).get('block_size') or 0) or '?'} tokens")
    st.dataframe(pd.DataFrame([{"stage": st_.stage, "capacity (blocks)": st_.capacity, "cached (blocks)": st_.cached,
                                "free (blocks)": st_.free, "escrowed (blocks)": st_.escrowed,
                                "leases (requests)": st_.leases, "evictions (blocks, since start)": st_.evictions}
                               for st_ in last.stages]), hide_index=True)
