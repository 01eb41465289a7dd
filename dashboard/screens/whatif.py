"""The Knobs page's what-if part: Preview a change, Suggest knobs, and predicted vs observed after Apply.

A preview or a suggestion runs as a :class:`dashboard.whatif_jobs.Job` (a thread of the dashboard's
process, with a time limit); the page draws its progress and, when it ends, its result. Nothing is
applied without the operator's click.
"""

from __future__ import annotations

import os
import time
from typing import Any

import pandas as pd
import streamlit as st

from wavepp.dashboard import admin, calibration
from wavepp.dashboard.calibration import PROFILE_ENV
from wavepp.dashboard.view import READ_NOW, View
from wavepp.dashboard.whatif_jobs import Inputs, Job, change_time_ns, inputs
from wavepp.runtime.control.knobs import KnobError, Knobs
from wavepp.runtime.figures.report import fmt
from wavepp.runtime.whatif.noise import gain
from wavepp.runtime.whatif.preview import (
    DEFAULT_TIME_LIMIT_S,
    DEFAULT_WINDOW_S,
    MIN_ARRIVALS,
    Prediction,
    PreviewResult,
    WhatIfError,
    observed_over,
    observed_since,
    preview,
)
from wavepp.runtime.whatif.report import (
    WITHIN_NOISE,
    Row,
    compare_rows,
    replay_check,
    spread_line,
    suggestion_line,
)
from wavepp.runtime.whatif.suggest import Goal, Suggestion, suggest
from wavepp.store.base import StoreError

JOB, APPLIED = "whatif_job", "whatif_applied"
SEARCH = "whatif_search"     # what the last Suggest searched (its replay, sim, knobs, goal): Continue reuses it
WROTE = "knobs_wrote"        # the last write's message, shown once the page has redrawn with its version
POLL_S = 0.5


def settings(view: View, meta: dict[str, Any]) -> dict[str, Any]:
    """The replay's window, its time limit and (a torch runtime) the calibration profile."""
    with st.expander("Preview and Suggest settings", expanded=meta.get("engine") == "torch"):
        cols = st.columns(3)
        window = cols[0].number_input("replay the arrivals of the last (s)", min_value=1.0, max_value=3600.0,
                                      value=DEFAULT_WINDOW_S, step=10.0, key="whatif_window")
        limit = cols[1].number_input("time limit (s)", min_value=1.0, max_value=600.0, value=DEFAULT_TIME_LIMIT_S,
                                     step=10.0, key="whatif_limit")
        profile = ""
        if meta.get("engine") == "torch":
            profile = cols[2].text_input("calibration profile (wavepp calibrate)",
                                         value=os.environ.get(PROFILE_ENV, ""), key="whatif_profile").strip()
        waiting = calibration.pending() if meta.get("engine") == "torch" else None
        if waiting is not None:
            st.caption(waiting)
    return {"window": float(window), "limit": float(limit), "profile": profile}


def default_settings() -> dict[str, Any]:
    """The settings the Knobs page's expander holds (its defaults where it has not been drawn): a
    preview started from another page replays what one started from the Knobs page would."""
    state = st.session_state
    return {"window": float(state.get("whatif_window", DEFAULT_WINDOW_S)),
            "limit": float(state.get("whatif_limit", DEFAULT_TIME_LIMIT_S)),
            "profile": str(state.get("whatif_profile", os.environ.get(PROFILE_ENV, ""))).strip()}


def _inputs(view: View, meta: dict[str, Any], opts: dict[str, Any]) -> Inputs | None:
    waiting = calibration.pending() if meta.get("engine") == "torch" else None
    if waiting is not None and opts["profile"] == os.environ.get(PROFILE_ENV, ""):
        st.info(waiting)
        return None
    try:
        return inputs(list(view.snap.spans), meta, opts["window"], opts["profile"])   # decoded once
    except WhatIfError as exc:
        st.error(f"Cannot preview: {exc}")
        return None


def start_preview(view: View, meta: dict[str, Any], opts: dict[str, Any], current: Knobs, proposed: Knobs) -> None:
    """The Preview button: replay the recent arrivals under the current and the proposed knobs."""
    got = _inputs(view, meta, opts)
    if got is not None:
        st.session_state[JOB] = Job("preview", lambda progress: preview(
            got.replay, got.sim, current, proposed, opts["limit"], progress), opts["limit"], got.replay)


def suggest_controls(view: View, meta: dict[str, Any], opts: dict[str, Any], current: Knobs) -> None:
    st.subheader("Suggest knobs")
    cols = st.columns([2, 2, 1])
    goal = cols[0].radio("goal", ["throughput", "latency"], horizontal=True, key="whatif_goal",
                         format_func=lambda g: "highest throughput" if g == "throughput" else
                         "lowest p95 prefill latency above a throughput floor")
    floor = cols[1].number_input("throughput floor (input tok/s; 0: the current knobs' predicted)", min_value=0.0,
                                 value=0.0, step=1000.0, key="whatif_floor", disabled=goal != "latency")
    cols[2].write("")
    if cols[2].button("Suggest", key="whatif_suggest", disabled=running()):
        got = _inputs(view, meta, opts)
        if got is not None:
            st.session_state[SEARCH] = (got, current, Goal(goal, float(floor) or None))
            _start_suggest(opts["limit"], None)
            st.rerun()        # the progress is drawn above this button: redraw now, not at the next click
    st.caption("Searches the wave budget (M), its floor (b_min) and the ring (R) on the same replay; "
               "nothing is applied until you click Apply.")


def _start_suggest(limit: float, resume: Suggestion | None) -> None:
    """Suggest on the replay the last Suggest click chose; ``resume``: the partial search it continues."""
    got, current, target = st.session_state[SEARCH]
    st.session_state[JOB] = Job("suggest", lambda progress: suggest(
        got.replay, got.sim, current, target, limit, progress, resume), limit, got.replay)


def running() -> bool:
    job = st.session_state.get(JOB)
    return job is not None and job.running


def results(view: View) -> None:
    """The running job's progress, or its result with an Apply button; then predicted vs observed."""
    job: Job | None = st.session_state.get(JOB)
    if job is not None and job.running:
        st.fragment(run_every=POLL_S)(_progress)()
    elif job is not None:
        if job.error:
            st.error(f"The {job.kind} could not run: {job.error}")
        elif isinstance(job.result, PreviewResult):
            _preview_result(view, job)
        elif isinstance(job.result, Suggestion):
            _suggestion_result(view, job)
    if st.session_state.get(APPLIED):
        st.fragment(run_every=2.0)(lambda: _after_apply(view))()


def _progress() -> None:
    job: Job | None = st.session_state.get(JOB)
    if job is None:
        return
    if not job.running:
        st.rerun()
    st.progress(min(job.fraction, 1.0), text=f"{job.kind}: {job.label} - {job.elapsed_s:.0f} s "
                                             f"(time limit {job.time_limit_s:.0f} s)")


def _table(rows: list[Row], headers: tuple[str, str, str, str]) -> None:
    st.dataframe(pd.DataFrame(rows, columns=list(headers)), hide_index=True)


def _preview_result(view: View, job: Job) -> None:
    r: PreviewResult = job.result
    st.subheader("Preview")
    change = ", ".join(f"{k}={v}" for k, v in r.changes.items()) or "no knob changed"
    st.caption(f"{change}: replayed {r.replay_note} in the {r.sim} ({job.elapsed_s:.1f} s)")
    _table(compare_rows(r.current.figures, r.proposed.figures, r.error), ("figure", "current", "proposed", "change"))
    st.caption(r.error.describe())
    if r.changes and r.within_noise:
        st.info(f"The predicted throughput change ({fmt(r.throughput_gain, '+.1%')}) is within noise: no larger "
                f"than the replay's own error (±{r.error.noise:.1%}).")
    _check(view, job, r.current)
    if spread := spread_line(r):
        st.caption(spread)
    if r.changes:
        _apply_button(view, r.changes, r.proposed, "Apply these knobs", "whatif_apply_preview")


def _suggestion_result(view: View, job: Job) -> None:
    s: Suggestion = job.result
    st.subheader("Suggestion")
    if not s.complete:        # never a success: the settings not tried may hold a better one
        st.warning(suggestion_line(s))
        if st.button(f"Continue the search ({s.planned - len(s.tried)} settings left)", key="whatif_continue",
                     disabled=SEARCH not in st.session_state):
            _start_suggest(job.time_limit_s, s)
            st.rerun()
    elif s.changes:
        st.success(suggestion_line(s))
    else:
        st.info(suggestion_line(s))
    st.caption(f"replayed {s.replay_note} in the {s.sim} ({job.elapsed_s:.1f} s); {s.error.describe()}")
    _table(compare_rows(s.current.figures, s.best.figures, s.error),
           ("figure", "current", "suggested" if s.complete else "best so far", "change"))
    _check(view, job, s.current)
    base = s.tried[0].figures.input_tokens_per_s if s.tried else None
    with st.expander(f"every setting tried ({len(s.tried)} of {s.planned})"):
        st.dataframe(pd.DataFrame([{"M": p.knobs["max_wave_tokens"], "b_min": p.knobs["min_wave_tokens"],
                                    "ring": p.knobs["ring"], "input tok/s": p.figures.input_tokens_per_s,
                                    "vs current": _versus(base, p.figures.input_tokens_per_s, s),
                                    "efficiency": p.figures.pipeline_efficiency,
                                    "prefill p95 (s)": p.figures.prefill_latency_p95_s} for p in s.tried]),
                     hide_index=True)
    if s.changes and s.complete:
        _apply_button(view, s.changes, s.best, "Apply suggested knobs", "whatif_apply_suggestion")


def _versus(base: float | None, value: float | None, s: Suggestion) -> str:
    change = gain(base, value)
    return "-" if change is None else f"{change:+.1%}" + (f" ({WITHIN_NOISE})" if s.error.within(change) else "")


def _check(view: View, job: Job, current: Prediction) -> None:
    """The replay of the current knobs next to what the run did over the same arrivals."""
    if job.replay is not None:
        st.caption(replay_check(current, observed_over(list(view.snap.spans), job.replay, view.snap.num_stages)))


def _apply_button(view: View, changes: dict[str, Any], predicted: Prediction, label: str, key: str) -> None:
    if not view.snap.live:
        st.caption("A saved run is read-only: apply these on a live deployment.")
        return
    if st.button(f"{label} for the next run" if next_run_only(view) else label, key=key):
        applied(view, changes, predicted)


def applied(view: View, changes: dict[str, Any], predicted: Prediction) -> None:
    """Write ``changes`` and remember the prediction for predicted vs observed after the change."""
    if not admin.may_write():
        st.error(admin.REFUSED)
        return
    try:
        record = view.source.write_knobs(changes)
    except (KnobError, StoreError) as exc:
        st.error(f"Nothing was written: {exc}")
        return
    _remember(changes, predicted, record.version)
    wrote(view, record.version, changes)


def next_run_only(view: View) -> bool:
    """A store whose runtime has stopped (finished or failed): nothing runs to apply a write, which
    then waits for the next run on this store (a bench keeps the knobs and starts with them). The
    embedded runtime is restarted from the page instead, and refuses a write while it is stopped."""
    return view.source.kind == "store" and view.snap.live and not view.running


def wrote(view: View, version: int, changes: dict[str, Any]) -> None:
    """A write succeeded: redraw the page at once so its version caption and History show it (the
    Knobs page is not redrawn under the operator's typing otherwise), the message above them."""
    what = ", ".join(f"{k}={v}" for k, v in changes.items())
    st.session_state[WROTE] = (f"Wrote version {version} for the next run on this store (this one has stopped): "
                               f"{what}" if next_run_only(view) else f"Wrote version {version}: {what}")
    st.session_state[READ_NOW] = True
    st.rerun()


def _remember(changes: dict[str, Any], predicted: Prediction, version: int) -> None:
    st.session_state[APPLIED] = {"changes": changes, "predicted": predicted, "version": version,
                                 "after_ns": time.time_ns() - 2_000_000_000}


def remember_applied(changes: dict[str, Any], version: int) -> None:
    """The form's Apply: when it applies exactly what the last preview proposed, compare that
    prediction with what the runtime then does."""
    job: Job | None = st.session_state.get(JOB)
    result = job.result if job is not None else None
    if isinstance(result, PreviewResult) and result.changes == changes:
        _remember(changes, result.proposed, version)
    elif isinstance(result, Suggestion) and result.changes == changes:
        _remember(changes, result.best, version)


def _after_apply(view: View) -> None:
    """Predicted vs observed over the requests that arrived after the runtime applied the change."""
    info = st.session_state.get(APPLIED)
    if not info:
        return
    st.subheader("After Apply: predicted vs observed")
    snap = view.source.snapshot(view.snap.run_id or None)
    spans = list(snap.spans)             # a live source's window decodes as it is read: once here
    since = change_time_ns(spans, info["changes"], info["after_ns"])
    change = ", ".join(f"{k}={v}" for k, v in info["changes"].items())
    if since is None:
        st.info(f"Waiting for the runtime to apply version {info['version']} ({change}) at its next wave boundary.")
        return
    observed = observed_since(spans, since, snap.num_stages)
    if observed.completed < MIN_ARRIVALS:
        st.info(f"{observed.completed} requests finished since the runtime applied {change}; the comparison "
                f"needs {MIN_ARRIVALS}.")
        return
    st.caption(f"{change}, applied {(spans[-1]['t1'] - since) / 1e9:.0f} s ago: "
               f"the {observed.completed} requests that arrived since")
    rows = compare_rows(info["predicted"].figures, observed)
    _table(rows, ("figure", "predicted", "observed", "observed vs predicted"))
