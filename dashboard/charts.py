"""Plotly figures built from :mod:`dashboard.frames` tables. Pure: no Streamlit here."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from wavepp.dashboard.frames import Frames, busy_bins, shown_ids
from wavepp.runtime.figures.idle_causes import CAUSES, MEANING

PALETTE = ["#4C78A8", "#F58518", "#54A24B", "#B279A2", "#72B7B2", "#EECA3B", "#9D755D", "#FF9DA6"]   # waves
KIND_WIDTH = {"execute": 0.62, "materialize": 0.22, "send": 0.12, "wait": 0.62}
# Idle time by cause: colours no wave uses, drawn hatched (a bubble never reads as a wave).
CAUSE_COLOURS = {"fill": "#BDBDBD", "drain": "#8C8C8C", "kv_capacity": "#A50F15", "preparation": "#17BECF",
                 "transfer": "#BCBD22", "previous_stage": "#6A51A3", "admission": "#E7298A", "ring_full": "#252525",
                 "no_work": "#D62728", "other": "#E0E0E0"}
EXTRA_COLOURS = ["#00441B", "#7F2704", "#08306B"]      # causes added after these were picked
# Steps other than execute: colours neither a wave nor an idle cause uses (drain and fill are greys).
KIND_COLOURS = {"materialize": "#A6761D", "send": "#993404", "wait": CAUSE_COLOURS["kv_capacity"]}


def cause_colour(cause: str) -> str:
    if cause in CAUSE_COLOURS:
        return CAUSE_COLOURS[cause]
    extra = [c for c in CAUSES if c not in CAUSE_COLOURS]
    return EXTRA_COLOURS[extra.index(cause) % len(EXTRA_COLOURS)] if cause in extra else "#E0E0E0"


def cause_name(cause: str) -> str:
    """The legend entry of a cause: "idle: waiting for admitted work"."""
    return f"idle: {MEANING.get(cause, cause.replace('_', ' '))}"


def lane(stage: int) -> str:
    return f"stage {stage}"


def add_knob_marks(fig: go.Figure, marks: Sequence[tuple[float, str]], start: float = -np.inf,
                   end: float = np.inf) -> go.Figure:
    """Knob changes as dashed vertical markers on a time axis."""
    for t, text in marks:
        if start <= t <= end:
            fig.add_vline(x=t, line_dash="dash", line_color="#d62728", annotation_text=f"knobs: {text}",
                          annotation_position="top left", annotation_font_size=10)
    return fig


def timeline(fr: Frames, start: float, end: float, idle: pd.DataFrame | None = None) -> go.Figure:
    """Detailed recent window: one lane per stage; execute bars coloured by wave, materialize and
    send as thin bars beside them, every idle interval hatched in its cause's colour (``idle``:
    :func:`dashboard.frames.idle_window`; hover names the cause and the wave it waited for)."""
    fig = go.Figure()
    lanes = [lane(s) for s in range(fr.num_stages)]
    if idle is not None and len(idle):
        carried = dict(zip(fr.plans["wave"], fr.plans["requests"], strict=True))
        for cause, rows in idle.groupby("cause", sort=False):
            waited = [f"wave {w} (requests {shown_ids(carried[w])})" if w in carried
                      else (f"wave {w}" if w >= 0 else "-") for w in rows["wave"]]
            fig.add_trace(go.Bar(
                name=cause_name(str(cause)), orientation="h", y=[lane(s) for s in rows["stage"]], base=rows["t0"],
                x=rows["t1"] - rows["t0"], width=0.75,
                marker=dict(color="rgba(255,255,255,0)", line_width=0,
                            pattern=dict(shape="/", fgcolor=cause_colour(str(cause)), fgopacity=0.9, solidity=0.45)),
                customdata=np.array([[MEANING.get(str(cause), str(cause)), w] for w in waited], dtype=object),
                hovertemplate="idle: %{customdata[0]}<br>waited for %{customdata[1]}<br>"
                              "%{base:.4f} s + %{x:.4f} s<extra></extra>"))
    win = fr.steps[(fr.steps["t1"] >= start) & (fr.steps["t0"] <= end)]
    for kind, rows in win.groupby("kind", sort=False):
        colours = [PALETTE[w % len(PALETTE)] for w in rows["wave"]] if kind == "execute" else None
        fig.add_trace(go.Bar(   # an execute bar's colour is its wave's: the legend says so, not one swatch
            name="execute (colour: its wave)" if kind == "execute" else str(kind), orientation="h",
            y=[lane(s) for s in rows["stage"]], base=rows["t0"],
            x=rows["t1"] - rows["t0"], width=KIND_WIDTH.get(str(kind), 0.3),
            marker_color=colours or KIND_COLOURS.get(str(kind), "#888888"),
            customdata=np.stack([rows["wave"], rows["tokens"]], axis=-1),
            hovertemplate=f"{kind}<br>wave %{{customdata[0]}}<br>%{{customdata[1]}} tokens<br>"
                          "%{base:.4f} s + %{x:.4f} s<extra></extra>"))
    fig.update_layout(barmode="overlay", height=140 + 60 * fr.num_stages, margin=dict(l=10, r=10, t=30, b=30),
                      xaxis_title="time (s)", legend_orientation="h", legend_y=-0.25)
    fig.update_yaxes(categoryorder="array", categoryarray=lanes[::-1], type="category")
    fig.update_xaxes(range=[start, end])
    return add_knob_marks(fig, fr.knob_marks, start, end)


def idle_bars(shares: pd.DataFrame, num_stages: int, length: float) -> go.Figure:
    """Per stage, the share of the window idle, stacked by cause (``shares``:
    :func:`dashboard.frames.idle_shares`)."""
    fig = go.Figure()
    lanes = [lane(s) for s in range(num_stages)]
    for cause in [c for c in CAUSES if c in set(shares["cause"])] + sorted(set(shares["cause"]) - set(CAUSES)):
        mine = shares[shares["cause"] == cause].set_index("stage")["share"]
        fig.add_trace(go.Bar(name=cause_name(cause), x=lanes, y=[float(mine.get(s, 0.0)) for s in range(num_stages)],
                             marker_color=cause_colour(cause),
                             hovertemplate=f"{MEANING.get(cause, cause)}: %{{y:.1%}}<extra>%{{x}}</extra>"))
    fig.update_layout(barmode="stack", title=f"idle time by cause over the last {length:.3f} s (share of the window)",
                      height=320, margin=dict(l=10, r=10, t=40, b=30), yaxis_tickformat=".1%",
                      xaxis_title="stage", yaxis_title="share of the window idle", legend_orientation="h",
                      legend_y=-0.2)
    return fig


HISTORY_BINS = 1500          # the whole-run chart's columns (about one per pixel)


def history(fr: Frames, x_range: tuple[float, float] | None = None) -> go.Figure:
    """The whole run at once: each stage's busy share per 1/HISTORY_BINS of the run, as a strip
    (white: idle, blue: executing all the time) - an image the browser draws at once however many
    steps the run has; the detail window shows every step. ``x_range``: the time axis to draw it on
    (several runs on one axis); the run's own span by default."""
    start, end = fr.start, max(fr.end, fr.start + 1e-9)
    bins = HISTORY_BINS
    busy = busy_bins(fr.steps, fr.num_stages, start, end, bins)
    width = (end - start) / bins
    fig = go.Figure(go.Heatmap(
        z=busy, x=start + width * (np.arange(bins) + 0.5), y=[lane(s) for s in range(fr.num_stages)],
        zmin=0, zmax=1, colorscale=[[0.0, "#FFFFFF"], [1.0, PALETTE[0]]], xgap=0, ygap=6,
        colorbar=dict(title="busy", thickness=10, tickformat=".0%"),
        hovertemplate=f"%{{y}}<br>%{{x:.3f}} s ± {width / 2:.3g} s<br>busy %{{z:.0%}}<extra></extra>"))
    fig.update_layout(height=90 + 45 * fr.num_stages, margin=dict(l=10, r=10, t=30, b=30), xaxis_title="time (s)")
    fig.update_yaxes(categoryorder="array", categoryarray=[lane(s) for s in range(fr.num_stages)][::-1])
    fig.update_xaxes(range=list(x_range) if x_range is not None else [start, end])
    return add_knob_marks(fig, fr.knob_marks)


def lines(df: pd.DataFrame, x: str, y: str, color: str | None = None, title: str = "",
          marks: Sequence[tuple[float, str]] = (), y_title: str = "", means: bool = False,
          markers: bool = False) -> go.Figure:
    """One line per ``color`` group over time. ``means``: each group's mean over the chart as a dashed
    line of its colour (a spiky rate read against its level); ``markers``: points too, so a group drawn
    in a single bin still shows. A group with no value at all is left out (never a legend entry alone)."""
    fig = go.Figure()
    groups = df.groupby(color, sort=False) if color else [(y, df)]
    for i, (name, rows) in enumerate(groups):
        if rows[y].isna().all():
            continue
        colour = PALETTE[i % len(PALETTE)]
        fig.add_trace(go.Scatter(x=rows[x], y=rows[y], mode="lines+markers" if markers else "lines",
                                 name=str(name), line_color=colour))
        if means:
            mean = float(rows[y].mean())
            fig.add_trace(go.Scatter(x=[rows[x].min(), rows[x].max()], y=[mean, mean], mode="lines",
                                     name=f"{name} mean ({mean:,.0f})", line=dict(color=colour, dash="dash")))
    # the legend below the x axis's title, not over it
    fig.update_layout(title=title, height=320, margin=dict(l=10, r=10, t=40, b=30), xaxis_title="time (s)",
                      yaxis_title=y_title, legend_orientation="h", legend_y=-0.3)
    return add_knob_marks(fig, marks)


WATERFALL_COLOURS = {"prefill": "#D9D9D9", "queued": "#BDBDBD", "lookup": "#1B9E77", "lease": "#7570B3",
                     "escrow": "#E6AB02", "materialize": KIND_COLOURS["materialize"], "execute": PALETTE[0],
                     "send": KIND_COLOURS["send"],
                     "waiting for a wave": "#F2F2F2"}


def waterfall(rows: pd.DataFrame, num_stages: int) -> go.Figure:
    """One request's way through the run (``rows``: :func:`dashboard.frames.request_waterfall`)."""
    order = ["prefill", "queued", "admission round"] + [lane(s) for s in range(num_stages)]
    fig = go.Figure()
    for kind, mine in rows.groupby("kind", sort=False):
        fig.add_trace(go.Bar(name=str(kind), orientation="h", y=mine["row"], base=mine["t0"],
                             x=(mine["t1"] - mine["t0"]).clip(lower=1e-6), width=0.6,
                             marker_color=WATERFALL_COLOURS.get(str(kind), "#888888"), customdata=mine[["detail"]],
                             hovertemplate=f"{kind}<br>%{{customdata[0]}}<br>%{{base:.4f}} s + %{{x:.4f}} s"
                                           "<extra></extra>"))
    fig.update_layout(barmode="overlay", height=160 + 32 * len(order), margin=dict(l=10, r=10, t=30, b=30),
                      xaxis_title="seconds since the request arrived", legend_orientation="h", legend_y=-0.35)
    fig.update_yaxes(categoryorder="array", categoryarray=[r for r in order if r in set(rows["row"])][::-1])
    return fig


def causes_side_by_side(windows: Sequence[tuple[str, dict[str, float]]]) -> go.Figure:
    """Idle causes (share of stage time) of a few windows, grouped by cause."""
    fig = go.Figure()
    causes = [c for c in CAUSES if any(c in w for _, w in windows)]
    for name, shares in windows:
        fig.add_trace(go.Bar(name=name, x=[MEANING.get(c, c) for c in causes], y=[shares.get(c, 0.0) for c in causes]))
    fig.update_layout(title="idle time by cause (share of stage time)", barmode="group", height=360,
                      yaxis_tickformat=".0%", xaxis_title="idle cause", yaxis_title="share of stage time",
                      margin=dict(l=10, r=10, t=70, b=30), legend_orientation="h", legend_y=1.12)
    return fig
