"""The Knobs page: invalid input is refused next to its field and nothing is written; valid input
is written; and a change made through the dashboard's code path reaches the running runtime."""

from __future__ import annotations

import asyncio
import os
import time
import uuid

import pytest
from streamlit.testing.v1 import AppTest

from wavepp.dashboard.knob_form import parse
from wavepp.runtime.control.knobs import Knobs
from wavepp.store.redis_store import RedisStore
from wavepp.telemetry import names as N

from .conftest import APP, live_run  # type: ignore[import-not-found]


def fresh_url() -> str:
    return f"redis://127.0.0.1:6379/13?cluster=knobs-{uuid.uuid4().hex[:8]}"


def version(url: str) -> int:
    async def read() -> int:
        store = await RedisStore.connect(url)
        try:
            return (await store.knobs_get()).version
        finally:
            await store.close()
    return asyncio.run(read())


def knobs_page(url: str) -> AppTest:
    os.environ["WAVEPP_DASHBOARD"] = f"store:{url}"
    at = AppTest.from_file(APP, default_timeout=60)
    at.session_state["page"] = "Knobs"
    at.run()
    assert not at.exception
    return at


def field(at: AppTest, name: str):  # type: ignore[no-untyped-def]
    return next(w for w in at.text_input if w.key == f"knob_{name}")


@pytest.mark.parametrize("name, value, message", [
    ("ring", "eight", "expected an integer"),                   # wrong type
    ("max_leases", "0", "out of range"),                        # out of range
    ("min_wave_tokens", "32768", "b_min 32768 > M 16384"),      # inconsistent pair
])
def test_invalid_input_is_refused_next_to_the_field(name: str, value: str, message: str, dashboard_env: None) -> None:
    url = fresh_url()
    at = knobs_page(url)
    field(at, name).input(value)
    at.button[0].click().run()
    errors = [e.value for e in at.error]
    assert any(message in e for e in errors), errors
    assert at.warning and "Nothing was written" in at.warning[0].value
    assert version(url) == 0


def test_valid_input_is_written(dashboard_env: None) -> None:
    url = fresh_url()
    at = knobs_page(url)
    field(at, "max_wave_tokens").input("8192")
    field(at, "min_wave_tokens").input("4096")
    at.button[0].click().run()
    assert at.success and "version 1" in at.success[0].value
    assert version(url) == 1


def test_a_change_from_the_dashboard_reaches_the_next_wave() -> None:
    """Operator halves the wave budget through the page's code path while a real-time run is going."""
    url = fresh_url()
    thread, out, source, snap = live_run(url, 5)
    current = Knobs(**snap.knobs.values)  # type: ignore[union-attr]
    changes, errors = parse({"max_wave_tokens": "8192", "min_wave_tokens": "4096"}, current)
    assert not errors
    written = source.write_knobs(changes)
    written_at = time.time_ns()
    thread.join(120)
    rec = out["rec"]
    plans = sorted((s for s in rec.encoded if s["n"] == N.WAVE_PLAN), key=lambda s: s["t0"])  # type: ignore[attr-defined]
    marked = [s for s in plans if any(e[0] == N.EVENT_KNOBS for e in s.get("ev", ()))]
    assert written.version >= 2 and len(marked) == 1
    before = [s for s in plans if s["t0"] < written_at and s["t0"] < marked[0]["t0"]]
    # The first wave planned after the write is at most one wave later than the marked one.
    waves_between = sum(1 for s in plans if written_at <= s["t0"] < marked[0]["t0"])
    assert waves_between <= 1, waves_between
    # The budget ran above 8192 before; from the marked wave on the new M (8192) caps every one.
    assert max(s["a"][N.BUDGET] for s in before if N.BUDGET in s["a"]) > 8192
    assert max(s["a"][N.BUDGET] for s in plans if s["t0"] >= marked[0]["t0"] and N.BUDGET in s["a"]) <= 8192


def test_every_knob_carries_its_help_from_the_schema(dashboard_env: None) -> None:
    """Issue 13: the form listed raw names with no unit, meaning or range."""
    from dataclasses import fields

    from wavepp.runtime.control.knobs import _RANGES, HELP, describe
    names = [f.name for f in fields(Knobs)]
    assert set(HELP) == set(names)                             # a knob added without help fails here
    text = describe("max_wave_tokens")
    assert all(part in text for part in ("Unit: tokens", "Default: 16384", f"{_RANGES['max_wave_tokens'][1]:,}",
                                         "multiple of the block size", "Effect on bubbles"))
    assert "Default: 0" in describe("ring") and "2P" in describe("ring")
    at = knobs_page(fresh_url())
    widgets = {w.key.removeprefix("knob_"): w for w in [*at.text_input, *at.selectbox, *at.checkbox]
               if w.key and w.key.startswith("knob_")}
    assert set(widgets) == set(names)
    # labelled in words with the knob's symbol and unit, not the raw schema name
    assert widgets["ring"].label == "ring (R) · waves in flight"
    assert widgets["max_wave_tokens"].label == "max wave tokens (M) · tokens (whole blocks)"
    assert all(widgets[n].help == describe(n) for n in names)
    table = next(d.value for d in at.dataframe if "unit" in d.value.columns)
    assert list(table["knob"]) == list(HELP) and table["unit"].str.len().min() > 0


def test_with_an_admin_token_the_page_asks_for_it_and_writes_nothing_until_it_matches(
        dashboard_env: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """Apply wrote to the store whoever had the page open. With WAVEPP_ADMIN_TOKEN in the
    dashboard's environment (as `wavepp serve` reads it for PUT /v1/knobs) the page has an Admin
    token field and a write without the right token is refused, nothing written."""
    url = fresh_url()
    assert not [w for w in knobs_page(url).text_input if w.label == "Admin token"]     # no token: no field
    monkeypatch.setenv("WAVEPP_ADMIN_TOKEN", "s3cret")
    at = knobs_page(url)

    def apply(token: str | None) -> None:
        if token is not None:
            next(w for w in at.text_input if w.label == "Admin token").input(token)
        field(at, "ring").input("4")
        next(b for b in at.button if b.label == "Apply").click().run()
        assert not at.exception

    for typed in (None, "wrong", "s3cre", "s3cret2"):
        apply(typed)
        assert any("needs the admin token" in e.value for e in at.error), [e.value for e in at.error]
        assert not at.success and version(url) == 0
    apply("s3cret")
    assert at.success and "version 1" in at.success[0].value, [e.value for e in at.error]
    assert version(url) == 1
