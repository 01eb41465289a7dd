"""Knobs: the scheduling knobs now, a form that validates before writing (or previews the change in the
simulator first: :mod:`dashboard.screens.whatif`), and their history."""

from __future__ import annotations

import dataclasses
from datetime import datetime
from typing import Any

import pandas as pd
import streamlit as st

from wavepp.dashboard import admin
from wavepp.dashboard.knob_form import field_types, parse, stored
from wavepp.dashboard.screens import whatif
from wavepp.dashboard.view import View
from wavepp.dashboard.whatif_jobs import saved_knobs
from wavepp.runtime.control.knobs import HELP, Deployment, KnobError, Knobs, choices, describe
from wavepp.runtime.whatif.preview import WhatIfError
from wavepp.store.base import StoreError


def render_knobs(view: View) -> None:
    st.header("Knobs")
    if message := st.session_state.pop(whatif.WROTE, None):
        st.success(message)
    record = view.snap.knobs
    meta = view.source.run_meta(view.snap)
    opts = whatif.settings(view, meta)
    if record is None:
        changed = "Its knob changes are listed below." if view.snap.knob_history else "No knob changed during it."
        st.info(f"This source has no live knobs (a saved run). {changed} Preview a change of the knobs it ended "
                f"with below.")
        try:
            current = saved_knobs(meta)
        except WhatIfError:
            current = Knobs()
        deployment = Deployment(int(meta.get("block_size") or 64), view.snap.num_stages) if meta else None
        _form(view, current, deployment, meta, opts)
    else:
        if record.note:
            st.warning(f"Knobs in the store: {record.note}")
        where = (f"; checked against the running deployment (block size {record.deployment.block_size}, "
                 f"{record.deployment.num_stages} stages)" if record.deployment else "")
        if whatif.next_run_only(view):
            st.caption(f"version {record.version} — this run has stopped: a write waits for the next run on this "
                       f"store, which starts with it{where}")
        else:
            st.caption(f"version {record.version} — the runtime applies a new version at its next wave "
                       f"boundary{where}")
        current = stored(record.values)
        if view.snap.live:
            admin.token_field()
        _form(view, current, record.deployment, meta, opts)
    whatif.results(view)
    whatif.suggest_controls(view, meta, opts, current)
    if view.snap.knob_history:
        rows = [{"version": h["version"], "time": datetime.fromtimestamp(h["time"]).isoformat(timespec="seconds")
                 if h["time"] > 1e9 else f"{h['time']:.3f}",
                 "changes": ", ".join(f"{k}={v}" for k, v in h["changes"].items())} for h in view.snap.knob_history]
        st.subheader("History")
        st.dataframe(pd.DataFrame(rows), hide_index=True)
    _help_table()


def current_knobs(view: View, meta: dict[str, Any]) -> tuple[Knobs, int]:
    """The knobs the shown run runs with now (a saved run: those it ended with) and its KV block size."""
    record = view.snap.knobs
    if record is not None:
        block = record.deployment.block_size if record.deployment else int(meta.get("block_size") or 64)
        return stored(record.values), block
    try:
        current = saved_knobs(meta)
    except WhatIfError:
        current = Knobs()
    return current, int(meta.get("block_size") or 64)


def knob_label(name: str) -> str:
    """A form field's label in words, with the knob's symbol and unit: "ring (R) · waves in flight"
    (the schema name stays the field's key and the hover help's first word)."""
    info = HELP[name]
    symbol, sep, _ = info.meaning.partition(": ")
    symbol = f" ({symbol})" if sep and " " not in symbol and len(symbol) <= 6 else ""
    return f"{name.replace('_', ' ')}{symbol} · {info.unit}"


def refusal_banner(view: View) -> None:
    """A live runtime refused a knobs record (another client wrote values it cannot use) and has
    accepted nothing newer since: say so, with the reason, above every page."""
    status = view.snap.status[-1] if view.snap.live and view.snap.status else None
    refused = status.knobs_refused if status is not None else None
    if status is not None and refused and status.knobs_version == refused.get("running"):
        st.error(f"The runtime refused knobs version {refused['version']}: {refused['reason']}. "
                 f"It keeps running with version {refused['running']}.")


def _help_table() -> None:
    """Every knob's unit, meaning, default, range and effect on bubbles (the schema's help)."""
    with st.expander("What each knob does"):
        st.dataframe(pd.DataFrame([{"knob": name, "unit": info.unit, "help": describe(name)}
                                   for name, info in HELP.items()]), hide_index=True)


def _form(view: View, current: Knobs, deployment: Deployment | None, meta: dict[str, Any],
          opts: dict[str, Any]) -> None:
    """The knobs; Apply writes them (a live source), Preview replays the recent arrivals under them first."""
    types = field_types()
    values: dict[str, object] = {}
    slots = {}
    with st.form("knobs"):
        cols = st.columns(2)
        for i, (name, kind) in enumerate(types.items()):
            col = cols[i % 2]
            value = getattr(current, name)
            help_ = describe(name)                       # the schema's help: unit, meaning, default, range, bubbles
            label = knob_label(name)
            if kind == "bool":
                values[name] = col.checkbox(label, value=value, key=f"knob_{name}", help=help_)
            elif kind == "choice":
                options = list(choices(name))
                values[name] = col.selectbox(label, options, index=options.index(value) if value in options else 0,
                                             key=f"knob_{name}", help=help_)
            else:
                values[name] = col.text_input(label, value=str(value), key=f"knob_{name}", help=help_)
            slots[name] = col.empty()                    # this field's error goes right under it
        buttons = st.columns([1, 1, 6])
        submitted = view.snap.live and buttons[0].form_submit_button(
            "Write for the next run" if whatif.next_run_only(view) else "Apply")
        previewed = buttons[1].form_submit_button("Preview", disabled=whatif.running())
    if not submitted and not previewed:
        return
    changes, errors = parse(values, current, deployment)
    for name, message in errors.items():
        (slots.get(name) or st).error(message)
    if errors:
        st.warning(f"Nothing was {'previewed' if previewed else 'written'}: fix the fields marked above.")
        return
    if not changes:
        st.info("No knob changed.")
        return
    if previewed:
        whatif.start_preview(view, meta, opts, current, dataclasses.replace(current, **changes))
        return
    if not admin.may_write():
        st.error(admin.REFUSED)
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
    whatif.remember_applied(changes, record.version)
    whatif.wrote(view, record.version, changes)
