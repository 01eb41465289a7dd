"""Compare: the windows before and after each knob change of the run on screen (live or saved), and
two saved runs side by side (e.g. wavepp vs trtllm-pp from one bench)."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from wavepp.dashboard import charts
from wavepp.dashboard.frames import build, idle_window, warmed_up, window_figures
from wavepp.dashboard.screens.common import FIGURES
from wavepp.dashboard.view import View
from wavepp.runtime.runs.runfile import SavedRun, load_runs

FIELDS = ["input_tokens_per_s", "computed_tokens_per_s", "pipeline_efficiency", "makespan_s",
          "admission_interval_p50_s", "admission_interval_p99_s", "requests_per_round_mean",
          "admission_latency_p99_s", "prefill_latency_p50_s", "prefill_latency_p95_s", "good_hit_rate",
          "sharing_in_flight", "fallbacks", "waves"]
WINDOW_FIELDS = ["input_tokens_per_s", "pipeline_efficiency", "prefill_latency_p50_s", "prefill_latency_p95_s",
                 "admission_interval_p50_s", "waves_per_s"]


def render_compare(view: View) -> None:
    st.header("Compare")
    if view.snap.live or view.frames.knob_marks:
        _before_after(view)
    _saved_runs(view)


def _before_after(view: View) -> None:
    """The run's figures and idle causes in the window before a knob change and the one after it
    (up to the neighbouring changes, or the run's ends), side by side."""
    st.subheader("Before and after a knob change")
    fr = view.frames
    marks = sorted(fr.knob_marks)
    if view.empty or not marks:
        st.info("No knob change in this run yet: once one is made (Knobs page), this compares the window "
                "before it with the window after it.")
        return
    pick = st.selectbox("Knob change", range(len(marks)), index=len(marks) - 1, key="compare_change",
                        format_func=lambda i: f"at {marks[i][0]:.3f} s: {marks[i][1]}")
    at = marks[pick][0]
    # Before the first change, the run's warm-up is left out: the window opens once every stage has
    # run a step (before that the pipeline fills, which no knob setting is responsible for).
    start = marks[pick - 1][0] if pick > 0 else min(max(fr.start, warmed_up(fr)), at)
    end = marks[pick + 1][0] if pick + 1 < len(marks) else fr.end
    windows = []
    for name, (a, b) in (("before", (start, at)), ("after", (at, end))):
        idle = idle_window(view.idle, fr.origin_ns, a, b, live=view.running)
        windows.append((f"{name} ({a:.3f}-{b:.3f} s)", window_figures(fr, idle, a, b)))
    (name_a, fa), (name_b, fb) = windows
    rows = []
    for key in WINDOW_FIELDS:
        fig = FIGURES[key]
        unit = f" ({fig.unit})" if fig.unit else ""
        ratio = fb[key] / fa[key] if fa.get(key) and fb.get(key) is not None else None
        rows.append({"figure": fig.name.removesuffix(" (run)") + unit, name_a: _plain(key, fa[key]),
                     name_b: _plain(key, fb[key]), "after / before": "-" if ratio is None else f"{ratio:.3f}x"})
    rows.append({"figure": "wave budget (median, tokens)", name_a: _tokens(fa["budget"]), name_b: _tokens(fb["budget"]),
                 "after / before": f"{fb['budget'] / fa['budget']:.3f}x" if fa["budget"] and fb["budget"] else "-"})
    for s, (x, y) in enumerate(zip(fa["bubble_fraction"], fb["bubble_fraction"], strict=True)):
        rows.append({"figure": f"stage {s} bubble fraction", name_a: f"{x:.3f}", name_b: f"{y:.3f}",
                     "after / before": f"{y / x:.3f}x" if x else "-"})
    st.table(pd.DataFrame(rows).set_index("figure"))
    st.caption(f"windows of {fa['window_s']:.3f} s and {fb['window_s']:.3f} s ({fa['completed']} and "
               f"{fb['completed']} requests completed): counts are compared as rates; the first window opens once "
               "every stage has run a step (the pipeline's fill is left out); a percentile needs enough "
               "completions in its window (p50 2, p95 20), else '-'")
    st.plotly_chart(charts.causes_side_by_side([(name_a, fa["idle_causes"]), (name_b, fb["idle_causes"])]),
                    key="before_after_causes")


def _tokens(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"


def _plain(key: str, value: object) -> str:
    fig = FIGURES[key]
    return fig.format(value).removesuffix(f" {fig.unit}")


def _saved_runs(view: View) -> None:
    # Runs are told apart by their place in this list (file, then run), never by label: two files
    # may well hold runs with the same label, or even the same file twice.
    runs = [(r, "this source") for r in view.source.runs()]
    if view.snap.live:
        st.subheader("Saved runs")
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
                          "Run A": [_value(ra, k) for k in FIELDS], "Run B": [_value(rb, k) for k in FIELDS],
                          "A / B": [_ratio(ra.figures.get(k), rb.figures.get(k)) for k in FIELDS]})
    st.dataframe(table, hide_index=True)
    ratio = (ra.figures["input_tokens_per_s"] / rb.figures["input_tokens_per_s"]
             if ra.figures.get("input_tokens_per_s") is not None and rb.figures.get("input_tokens_per_s")
             else float("nan"))
    st.metric("input throughput, Run A / Run B", f"{ratio:.3f}x")
    st.plotly_chart(_bubbles(ra, rb), key="compare_bubbles")
    # Both runs on one time axis (seconds since each run's first span): a run twice as long draws twice as long.
    frames = [build(run.spans, int(run.meta.get("pp", 0)) or None) for run in (ra, rb)]
    end = max(fr.end for fr in frames)
    for which, run, fr, key in (("Run A", ra, frames[0], "a"), ("Run B", rb, frames[1], "b")):
        st.caption(f"{which}: {run.label} ({fr.end - fr.start:.3f} s)")
        st.plotly_chart(charts.history(fr, x_range=(0.0, end)), key=f"hist_{key}")


def _ratio(a: object, b: object) -> str:
    """``a / b`` of two numbers as "1.234x"; "-" where either is missing (or not a number) or b is 0."""
    if isinstance(a, bool) or isinstance(b, bool) or not isinstance(a, int | float) or not isinstance(b, int | float):
        return "-"
    return f"{a / b:.3f}x" if b else "-"


def _value(run: SavedRun, key: str) -> str:
    """The figure as the pages show it, without its unit (the row names it)."""
    fig = FIGURES[key]
    return fig.format(run.figures.get(key)).removesuffix(f" {fig.unit}")


def _bubbles(ra: SavedRun, rb: SavedRun) -> go.Figure:
    fig = go.Figure()
    for which, run in (("Run A", ra), ("Run B", rb)):
        fracs = run.figures.get("bubble_fraction") or []     # null: the run completed nothing
        fig.add_trace(go.Bar(x=[f"stage {i}" for i in range(len(fracs))], y=fracs, name=which))
    fig.update_layout(title="bubble fraction per stage", barmode="group", height=300, xaxis_title="stage",
                      yaxis_title="share of the run idle")
    return fig
