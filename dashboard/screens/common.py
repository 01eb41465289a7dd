"""Small helpers the pages share."""

from __future__ import annotations

import time

import streamlit as st

from dashboard.view import View


def no_data(view: View, what: str = "spans") -> bool:
    """Show a clear note and return True when there is nothing to draw yet."""
    if view.empty:
        st.info(f"No {what} yet — waiting for the runtime." if view.snap.live else f"This run has no {what}.")
        return True
    return False


def span_age(view: View) -> None:
    """Live views: how old the newest span on screen is (span end -> screen)."""
    if view.snap.live and view.snap.spans:
        newest = max(s["t1"] for s in view.snap.spans)
        age = time.time() - newest / 1e9
        if abs(age) < 3600:                 # wall-clock runs only (virtual-time spans sit on a fixed epoch)
            st.caption(f"newest span ended {age:.2f} s before this render")
