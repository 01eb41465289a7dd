"""Autopilot: what the runtime's autopilot decided, window by window, over the throughput and TTFT it measured -
each apply with its predicted and observed gain - its settings (mode, bounds, frozen) and the operator's
controls: switch it, freeze or resume it, move its bounds (behind the admin token). docs/autopilot.md."""

from __future__ import annotations

import json
from typing import Any

import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from wavepp.dashboard import admin
from wavepp.dashboard.charts import PALETTE
from wavepp.dashboard.screens.common import no_data
from wavepp.dashboard.view import READ_NOW, View
from wavepp.runtime.autopilot.settings import MODES, SettingsError, parse_bounds
from wavepp.store.base import StoreError
from wavepp.telemetry import names as N

# How each action is drawn on the timeline (marker symbol, colour); the rest are plain window points.
MARKS = {"apply": ("triangle-up", "#1B9E77"), "rollback": ("triangle-down", "#D95F02"),
         "advise": ("circle-open", "#7570B3"), "keep": ("circle", "#666666")}


def decision_rows(decisions: list[dict[str, Any]], origin_ns: int) -> pd.DataFrame:
    """One row a decision: its window's end (s after ``origin_ns``), figures and what was decided."""
    rows = []
    for d in decisions:
        a = d["a"]
        try:
            w = json.loads(a.get(N.AUTOPILOT_WINDOW, "{}"))
        except ValueError:
            w = {}
        rows.append({"t": (d["t0"] - origin_ns) / 1e9, "window": w.get("index"), "action": a.get(N.AUTOPILOT_ACTION),
                     "input tok/s": w.get("input_tps"), "TTFT p99 (s)": w.get("ttft_p99_s"),
                     "changes": a.get(N.AUTOPILOT_CHOSEN, ""), "predicted": a.get(N.AUTOPILOT_PREDICTED_GAIN),
                     "observed": a.get(N.AUTOPILOT_OBSERVED_GAIN), "verdict": a.get(N.AUTOPILOT_VERDICT, ""),
                     "why": a.get(N.AUTOPILOT_WHY, "")})
    return pd.DataFrame(rows)


def timeline(rows: pd.DataFrame) -> go.Figure:
    """Each window's input tok/s (left axis) and TTFT p99 (right), the decisions marked on the throughput."""
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=rows["t"], y=rows["input tok/s"], mode="lines", name="input tok/s (window)",
                             line_color=PALETTE[0]))
    fig.add_trace(go.Scatter(x=rows["t"], y=rows["TTFT p99 (s)"], mode="lines", name="TTFT p99 (window)",
                             line=dict(color=PALETTE[1], dash="dot"), yaxis="y2"))
    for action, (symbol, colour) in MARKS.items():
        picked = rows[rows["action"] == action]
        if not len(picked):
            continue
        hover = [f"{action}: {c or '-'}<br>predicted {_pct(p)}, observed {_pct(o)}<br>{w[:120]}"
                 for c, p, o, w in zip(picked["changes"], picked["predicted"], picked["observed"], picked["why"],
                                       strict=True)]
        fig.add_trace(go.Scatter(x=picked["t"], y=picked["input tok/s"], mode="markers", name=action,
                                 marker=dict(symbol=symbol, size=13, color=colour), hovertext=hover,
                                 hoverinfo="text"))
    fig.update_layout(title="the autopilot's windows: throughput, TTFT p99 and its decisions", height=360,
                      margin=dict(l=10, r=10, t=40, b=30), xaxis_title="time (s)", yaxis_title="tokens/s",
                      yaxis2=dict(title="TTFT p99 (s)", overlaying="y", side="right"), legend_orientation="h",
                      legend_y=-0.3)
    return fig


def _pct(x: Any) -> str:
    return "-" if x is None or (isinstance(x, float) and x != x) else f"{x:+.1%}"


def render_autopilot(view: View) -> None:
    st.header("Autopilot")
    if no_data(view):
        return
    record = view.source.autopilot()
    if record is not None:
        _settings(view, record)
    if not view.decisions:
        if record is not None and record.get("mode") != "off":
            st.caption("No decision yet: the autopilot decides at the end of each window.")
        elif view.snap.live:
            st.info("No autopilot runs on this deployment (start it with `wavepp serve --autopilot on` or "
                    "`wavepp dashboard --autopilot on`): nothing is tuned automatically.")
        else:
            st.info("This run had no autopilot (`wavepp bench --autopilot on --save-run FILE` records its "
                    "decisions with the run).")
        return
    rows = decision_rows(view.decisions, view.frames.origin_ns)     # the other pages' time axis
    counts = rows["action"].value_counts()
    cols = st.columns(4)
    cols[0].metric("windows decided", len(rows))
    cols[1].metric("applied", int(counts.get("apply", 0)))
    cols[2].metric("rolled back", int(counts.get("rollback", 0)))
    cols[3].metric("advised", int(counts.get("advise", 0)))
    st.plotly_chart(timeline(rows), key="autopilot_timeline")
    judged = rows[rows["verdict"] != ""]
    if len(judged):
        st.subheader("Applies, predicted against observed")
        st.dataframe(judged[["window", "verdict", "predicted", "observed", "why"]], hide_index=True)
    st.subheader("Decisions")
    st.dataframe(rows[["window", "action", "input tok/s", "TTFT p99 (s)", "changes", "why"]].iloc[::-1],
                 hide_index=True)


def _settings(view: View, record: dict[str, Any]) -> None:
    mode, frozen = record.get("mode", "off"), bool(record.get("frozen"))
    bounds = ", ".join(f"{k} {v[0]}..{v[1]}" for k, v in (record.get("bounds") or {}).items()) or "none"
    state = f"**{mode}**" + (f" — frozen: {record.get('frozen_why') or 'by the operator'}" if frozen else "")
    st.markdown(f"Mode {state}; window {record.get('window_s', '-')} s; bounds: {bounds}; policy changes "
                f"{'allowed' if record.get('allow_policy') else 'never'}.")
    if not view.snap.live:
        return
    admin.token_field()
    with st.form("autopilot"):
        cols = st.columns([1, 2, 1, 1])
        chosen = cols[0].selectbox("mode", MODES, index=MODES.index(mode) if mode in MODES else 0)
        text = cols[1].text_input("bounds (KNOB=LO:HI,...)", value=",".join(
            f"{k}={v[0]}:{v[1]}" for k, v in (record.get("bounds") or {}).items()))
        write = cols[2].form_submit_button("Write")
        toggle = cols[3].form_submit_button("Resume" if frozen else "Freeze")
    if not write and not toggle:
        return
    if not admin.may_write():
        st.error(admin.REFUSED)
        return
    try:
        changes: dict[str, Any] = {"frozen": not frozen, "frozen_why": "" if frozen else "frozen by the operator"} \
            if toggle else {"mode": chosen, "bounds": parse_bounds(text)}
        view.source.write_autopilot(changes)
    except (SettingsError, ValueError, StoreError) as exc:
        st.error(str(exc))
        return
    st.session_state[READ_NOW] = True
    st.success("Written: the autopilot reads it at the end of its current window.")
