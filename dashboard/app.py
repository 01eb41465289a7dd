"""WavePP operator dashboard (Streamlit). Started by ``wavepp dashboard``.

The source comes from ``WAVEPP_DASHBOARD``: ``run:FILE`` (a saved run), ``store:URL`` (a live
deployment on Redis) or ``embedded`` (the runtime started by ``wavepp dashboard`` in this
process).

Live pages are redrawn only when their data changed: a small watcher (``st.fragment``, every
second) reads the source's position (spans received, status, knobs) and reruns the page when it
moved; otherwise it only refreshes the runtime's banner and the age of the newest span. Tables
and figures are computed once per position (:func:`load`), so a finished run costs a poll per
second and nothing more.
"""

from __future__ import annotations

import os
import time
from typing import Any

import streamlit as st

from wavepp.dashboard import follow
from wavepp.dashboard.screens import PAGES
from wavepp.dashboard.screens.common import runtime_banner, span_age
from wavepp.dashboard.screens.knobs import refusal_banner
from wavepp.dashboard.sources import EmbeddedSource, RunFileSource, Snapshot, StoreSource
from wavepp.dashboard.view import READ_NOW, View, ViewCache
from wavepp.store.urls import redact

REFRESH_S = 1.0
DRAW_LOG = os.environ.get("WAVEPP_DASHBOARD_DRAW_LOG", "")   # a file: one line per page draw (time, seconds)
NEWEST = ""                 # run choice of a live view: follow the newest run until the operator picks one


@st.cache_resource(show_spinner=False)
def get_source(spec: str) -> Any:
    """One source per process (the Redis client and the span window live as long as the server)."""
    kind, _, arg = spec.partition(":")
    if kind == "run":
        return RunFileSource(arg)
    if kind == "store":
        followed = follow.FOLLOWED
        if followed is not None and isinstance(followed.source, StoreSource) and followed.spec == spec:
            return followed.source           # followed since `wavepp dashboard --store` started
        return StoreSource(arg)
    if kind == "embedded":
        from wavepp.dashboard import embedded
        if embedded.CURRENT is None:
            raise ValueError("no embedded runtime in this process: start it with `wavepp dashboard`")
        followed = follow.FOLLOWED
        if followed is not None and isinstance(followed.source, EmbeddedSource) and \
                followed.source.runtime is embedded.CURRENT:
            return followed.source           # followed since `wavepp dashboard` started it
        return EmbeddedSource(embedded.CURRENT)
    raise ValueError(f"unknown dashboard source {spec!r} (run:FILE, store:URL or embedded)")


@st.cache_resource(show_spinner=False)
def _views(spec: str) -> tuple[ViewCache, follow.Follower | None]:
    """One cache per source, shared by every session that views it; a live source's newest run is
    kept derived in the background by its follower (:mod:`dashboard.follow`)."""
    source = get_source(spec)
    followed = follow.FOLLOWED
    if followed is not None and followed.source is source:
        return followed.views, followed
    views = ViewCache()
    return views, (follow.Follower(source, views, REFRESH_S).start() if source.live else None)


def load(spec: str, run_id: str | None) -> View:
    """The run's view: a live source's newest run as its follower last derived it (the page reads
    nothing itself); another run's recomputed only when the snapshot's position moved."""
    views, follower = _views(spec)
    if follower is not None and not run_id:
        fresh = st.session_state.pop(READ_NOW, False)
        return follower.update() if fresh or follower.newest is None else follower.newest
    source = get_source(spec)
    return views.view(source, source.snapshot(run_id or None))


def _due(drawn: tuple[Any, ...]) -> bool:
    """Whether the page may be drawn again: only once the draw of ``drawn`` finished - the watcher
    also runs inside the page's own run, before the page is drawn, and a rerun requested there
    would stop every draw of a run whose data moves while it loads - and a page that takes longer
    than the refresh to draw no more often than every other draw's time."""
    if st.session_state.get("_drawn") != drawn:
        return False
    drawn_at, took = float(st.session_state.get("_drawn_at", 0.0)), float(st.session_state.get("_draw_s", 0.0))
    return time.monotonic() - drawn_at >= max(REFRESH_S, 2 * took)


def _watch(spec: str, run_id: str | None, drawn: tuple[Any, ...], rerun: bool) -> None:
    """Every second: the runtime's banners; the whole page again only when its data moved."""
    view = load(spec, run_id)
    if rerun and view.snap.position != drawn and _due(drawn):
        st.rerun()
    runtime_banner(view.snap)
    if isinstance(view.source, EmbeddedSource) and view.source.stopped:
        st.button("Restart the runtime", key="restart_runtime", on_click=_restart, args=(view.source,))
    refusal_banner(view)
    span_age(view.snap)


def _restart(source: EmbeddedSource) -> None:
    """The Restart button: the runtime starts again, and the page that follows reads it at once (the
    follower's last view may still be of the runtime that stopped: its banner)."""
    source.restart()
    st.session_state[READ_NOW] = True


def _pick_run() -> str | None:
    """The run chosen in the sidebar (None: a live view's newest run, a saved file's first)."""
    choice = st.session_state.get("run_choice", NEWEST)
    return None if choice == NEWEST else choice


def _run_selector(snap: Snapshot, live: bool) -> None:
    """Runs by id, each with its label. A live view offers "newest run" first and stays on it (a new
    run takes over the view) until the operator picks a run; a picked run stays picked."""
    options = ([NEWEST] if live else []) + (list(reversed(snap.runs)) if live else list(snap.runs))
    if len(options) > 1:
        choice = st.session_state.get("run_choice", NEWEST)
        index = options.index(choice) if choice in options else 0

        def label(run_id: str) -> str:
            return f"newest run ({snap.runs[snap.run_id]})" if run_id == NEWEST else f"{snap.runs[run_id]} [{run_id}]"
        key = f"run_pick_{hash(tuple(options))}"      # the options changed: a new widget, the choice kept

        def keep() -> None:
            st.session_state["run_choice"] = st.session_state[key]
        st.sidebar.selectbox("Run", options, index=index, format_func=label, key=key, on_change=keep)
    st.sidebar.caption(f"run: {snap.label}" + (f" [{snap.run_id}]" if snap.run_id else ""))


def main() -> None:
    st.set_page_config(page_title="WavePP", layout="wide")
    began = time.monotonic()
    spec = os.environ.get("WAVEPP_DASHBOARD", "")
    st.sidebar.title("WavePP")
    page = st.sidebar.radio("Page", list(PAGES), key="page")
    try:
        source = get_source(spec)
    except Exception as exc:                         # one clear banner, never a traceback
        st.error(f"Cannot open the dashboard's source: {redact(str(exc))}")
        return
    st.sidebar.caption(f"source: {redact(spec)}")     # the spec is the URL the source connects with
    run_id = _pick_run()
    view = load(spec, run_id)
    _run_selector(view.snap, source.live)
    if source.live:
        # The Knobs page is not redrawn under the operator's typing; its banner still refreshes.
        st.fragment(run_every=REFRESH_S)(lambda: _watch(spec, run_id, view.snap.position, page != "Knobs"))()
    elif view.snap.error:
        st.warning(view.snap.error)
    PAGES[page](view)
    st.session_state["_drawn"] = view.snap.position
    st.session_state["_drawn_at"] = time.monotonic()
    st.session_state["_draw_s"] = took = time.monotonic() - began
    if DRAW_LOG:                                     # scripts/bench_dashboard.py reads each draw's time
        with open(DRAW_LOG, "a") as f:
            f.write(f"{time.time():.3f} {took:.4f} {len(view.snap.spans)}\n")


main()
