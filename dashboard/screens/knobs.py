"""Knobs: the scheduling knobs now, a form that validates before writing, and their history."""

from __future__ import annotations

from datetime import datetime

import pandas as pd
import streamlit as st

from dashboard.knob_form import field_types, parse, stored
from dashboard.view import View
from runtime.knobs import HELP, Deployment, KnobError, Knobs, choices, describe
from store.base import StoreError


def render_knobs(view: View) -> None:
    st.header("Knobs")
    record = view.snap.knobs
    if record is None:
        changed = "Its knob changes are listed below." if view.snap.knob_history else "No knob changed during it."
        st.info(f"This source has no live knobs (a saved run). {changed}")
    else:
        if record.note:
            st.warning(f"Knobs in the store: {record.note}")
        where = (f"; checked against the running deployment (block size {record.deployment.block_size}, "
                 f"{record.deployment.num_stages} stages)" if record.deployment else "")
        st.caption(f"version {record.version} — the runtime applies a new version at its next wave boundary{where}")
        _form(view, stored(record.values), record.deployment)
    if view.snap.knob_history:
        rows = [{"version": h["version"], "time": datetime.fromtimestamp(h["time"]).isoformat(timespec="seconds")
                 if h["time"] > 1e9 else f"{h['time']:.3f}",
                 "changes": ", ".join(f"{k}={v}" for k, v in h["changes"].items())} for h in view.snap.knob_history]
        st.subheader("History")
        st.dataframe(pd.DataFrame(rows), hide_index=True)
    _help_table()


def refusal_banner(view: View) -> None:
    """A live runtime refused a knobs record (another client wrote values it cannot use) and has
    accepted nothing newer since: say so, with the reason, above every page."""
    status = view.snap.status[-1] if view.snap.live and view.snap.status else {}
    refused = status.get("knobs_refused")
    if refused and status.get("knobs_version") == refused.get("running"):
        st.error(f"The runtime refused knobs version {refused['version']}: {refused['reason']}. "
                 f"It keeps running with version {refused['running']}.")


def _help_table() -> None:
    """Every knob's unit, meaning, default, range and effect on bubbles (the schema's help)."""
    with st.expander("What each knob does"):
        st.dataframe(pd.DataFrame([{"knob": name, "unit": info.unit, "help": describe(name)}
                                   for name, info in HELP.items()]), hide_index=True)


def _form(view: View, current: Knobs, deployment: Deployment | None) -> None:
    types = field_types()
    values: dict[str, object] = {}
    slots = {}
    with st.form("knobs"):
        cols = st.columns(2)
        for i, (name, kind) in enumerate(types.items()):
            col = cols[i % 2]
            value = getattr(current, name)
            help_ = describe(name)                       # the schema's help: unit, meaning, default, range, bubbles
            if kind == "bool":
                values[name] = col.checkbox(name, value=value, key=f"knob_{name}", help=help_)
            elif kind == "choice":
                options = list(choices(name))
                values[name] = col.selectbox(name, options, index=options.index(value) if value in options else 0,
                                             key=f"knob_{name}", help=help_)
            else:
                values[name] = col.text_input(name, value=str(value), key=f"knob_{name}", help=help_)
            slots[name] = col.empty()                    # this field's error goes right under it
        submitted = st.form_submit_button("Apply")
    if not submitted:
        return
    changes, errors = parse(values, current, deployment)
    for name, message in errors.items():
        (slots.get(name) or st).error(message)
    if errors:
        st.warning("Nothing was written: fix the fields marked above.")
        return
    if not changes:
        st.info("No knob changed.")
        return
    try:
        record = view.source.write_knobs(changes)
    except KnobError as exc:                              # a concurrent write made the pair inconsistent
        for name, message in exc.problems.items():
            (slots.get(name) or st).error(message)
        return
    except StoreError as exc:
        st.error(str(exc))
        return
    st.success(f"Wrote version {record.version}: " + ", ".join(f"{k}={v}" for k, v in changes.items()))
