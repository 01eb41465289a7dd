"""WavePP operator dashboard (Streamlit). Started by ``wavepp dashboard``.

The source comes from ``WAVEPP_DASHBOARD``: ``run:FILE`` (a saved run), ``store:URL`` (a live
deployment on Redis) or ``embedded`` (the runtime started by ``wavepp dashboard`` in this
process). Live pages refresh themselves every second.
"""

from __future__ import annotations

import os
from typing import Any

import streamlit as st

from dashboard.screens import PAGES
from dashboard.screens.knobs import refusal_banner
from dashboard.sources import EmbeddedSource, RunFileSource, StoreSource
from dashboard.view import View, make_view

REFRESH_S = 1.0


@st.cache_resource(show_spinner=False)
def get_source(spec: str) -> Any:
    """One source per process (the Redis client and the span window live as long as the server)."""
    kind, _, arg = spec.partition(":")
    if kind == "run":
        return RunFileSource(arg)
    if kind == "store":
        return StoreSource(arg)
    if kind == "embedded":
        from dashboard import embedded
        if embedded.CURRENT is None:
            raise ValueError("no embedded runtime in this process: start it with `wavepp dashboard`")
        return EmbeddedSource(embedded.CURRENT)
    raise ValueError(f"unknown dashboard source {spec!r} (run:FILE, store:URL or embedded)")


@st.cache_data(show_spinner=False, max_entries=16)
def load_saved(spec: str, label: str | None) -> View:
    """The one loader for saved runs (cached: a file does not change)."""
    source = get_source(spec)
    return make_view(source, source.snapshot(label))


def load(spec: str, label: str | None) -> View:
    source = get_source(spec)
    if not source.live:
        return load_saved(spec, label)
    return make_view(source, source.snapshot(label))


def draw(spec: str, page: str, label: str | None) -> None:
    view = load(spec, label)
    if view.snap.error:
        st.warning(view.snap.error)
    if isinstance(view.source, EmbeddedSource) and view.source.stopped:
        st.button("Restart the runtime", key="restart_runtime", on_click=view.source.restart)
    refusal_banner(view)
    PAGES[page](view)


def main() -> None:
    st.set_page_config(page_title="WavePP", layout="wide")
    spec = os.environ.get("WAVEPP_DASHBOARD", "")
    st.sidebar.title("WavePP")
    page = st.sidebar.radio("Page", list(PAGES), key="page")
    try:
        source = get_source(spec)
    except Exception as exc:                         # one clear banner, never a traceback
        st.error(f"Cannot open the dashboard's source: {exc}")
        return
    st.sidebar.caption(f"source: {spec}")
    labels = load(spec, None).snap.labels
    label = st.sidebar.selectbox("Run", labels, key="run_label") if len(labels) > 1 else None
    if source.live and page != "Knobs":
        st.fragment(run_every=REFRESH_S)(lambda: draw(spec, page, label))()
    else:
        draw(spec, page, label)


main()
