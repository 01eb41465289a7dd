"""Every page renders - on recorded data, on an empty store, and with the store unreachable."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from dashboard.screens import PAGES
from runtime.runfile import load_runs

from .conftest import APP  # type: ignore[import-not-found]

PAGE_NAMES = list(PAGES)


def run_page(source: str, page: str) -> AppTest:
    os.environ["WAVEPP_DASHBOARD"] = source
    at = AppTest.from_file(APP, default_timeout=60)
    at.session_state["page"] = page
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


@pytest.mark.parametrize("page", PAGE_NAMES)
def test_pages_on_recorded_data(page: str, saved_run: Path, dashboard_env: None) -> None:
    at = run_page(f"run:{saved_run}", page)
    assert [h.value for h in at.header] == [page]
    charts = at.get("plotly_chart")
    if page != "Knobs":
        assert charts, f"{page} drew no chart"
    if page == "Knobs":
        assert at.info and "saved run" in at.info[0].value          # read-only source: no form
        assert not at.get("form")
    if page == "Compare":
        assert any("throughput" in m.label for m in at.metric)


@pytest.mark.parametrize("page", PAGE_NAMES)
def test_pages_on_an_empty_store(page: str, dashboard_env: None) -> None:
    url = f"redis://127.0.0.1:6379/13?cluster=empty-{uuid.uuid4().hex[:8]}"
    at = run_page(f"store:{url}", page)
    assert not at.error or page == "Knobs"
    if page not in ("Knobs", "Compare"):
        assert at.info and "No spans yet" in at.info[0].value


def test_unreachable_store_is_a_banner_not_a_traceback(dashboard_env: None) -> None:
    at = run_page("store:redis://127.0.0.1:1/0", "Pipeline")
    assert at.warning and "store unreachable" in at.warning[0].value


def test_run_selector_switches_between_saved_runs(saved_run: Path, dashboard_env: None) -> None:
    at = run_page(f"run:{saved_run}", "Throughput and latency")
    runs = load_runs(saved_run)
    box = at.sidebar.selectbox[0]
    assert box.options == [f"{r.label} [{r.id}]" for r in runs]       # every run by id, with its label
    assert [r.label.split()[0] for r in runs] == ["wavepp", "trtllm-pp"]
    first = at.metric[0].value
    box.set_value(runs[1].id).run()
    assert at.metric[0].value != first
