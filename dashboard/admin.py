"""Who may change knobs from the dashboard. With ``WAVEPP_ADMIN_TOKEN`` in the dashboard's
environment (the variable ``wavepp serve`` reads for ``PUT /v1/knobs``) the Knobs page asks for the
token, and nothing is written (the form's Apply, Preview's and Suggest's) until the one typed
matches, compared in constant time. Without it anyone who reaches the page may write: the
dashboard listens on loopback by default.

The dashboard writes to the store directly, so this guards the page, not the store: whoever can
reach Redis can write knobs anyway (README, "What is exposed and how to lock it down").
"""

from __future__ import annotations

import hmac
import os

import streamlit as st

TOKEN_ENV = "WAVEPP_ADMIN_TOKEN"
TOKEN_KEY = "admin_token"            # the session's typed token
REFUSED = "Nothing was written: changing knobs needs the admin token (WAVEPP_ADMIN_TOKEN), and the one typed " \
          "above is missing or wrong."


def token_required() -> bool:
    return bool(os.environ.get(TOKEN_ENV))


def token_field() -> None:
    """Where the operator types the token (only when one is required)."""
    if token_required():
        st.text_input("Admin token", type="password", key=TOKEN_KEY,
                      help=f"this dashboard was started with {TOKEN_ENV}: knob writes need it")


def may_write() -> bool:
    """No token required, or the session typed the right one."""
    expected = os.environ.get(TOKEN_ENV, "")
    if not expected:
        return True
    typed = str(st.session_state.get(TOKEN_KEY) or "").strip()
    return bool(typed) and hmac.compare_digest(typed.encode(), expected.encode())
