"""The embedded sim demo at its own span rate (``wavepp dashboard --engine sim``: llama-3-8b, H200,
PP4, c = 64 in real time, about 2,000 spans a second) draws its Pipeline chart in headless
chromium, and keeps drawing as the run grows. The bound is generous for a loaded CI machine;
how fast it draws is the benchmark's (``make bench-dashboard``)."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from playwright.sync_api import Page

from .test_browser import chromium_page, lanes_with_data, serve  # type: ignore[import-not-found]

FIRST_CHART_S = 120

NEWEST_LANE_END = """() => {
  const plot = document.querySelector('.js-plotly-plot');
  const range = plot && plot._fullLayout && plot._fullLayout.xaxis && plot._fullLayout.xaxis.range;
  return range ? Number(range[1]) : null;
}"""


@pytest.fixture(scope="module")
def page() -> Iterator[Page]:
    yield from chromium_page(1400)


def test_the_embedded_sim_demo_draws_its_pipeline_chart(page: Page) -> None:
    proc, url = serve("--engine", "sim")
    try:
        page.goto(url)
        labels = lanes_with_data(page, 4, timeout_s=FIRST_CHART_S)
        assert {f"stage {s}" for s in range(4)} <= labels, labels
        first = page.evaluate(NEWEST_LANE_END)
        deadline = time.monotonic() + FIRST_CHART_S
        later = first
        while time.monotonic() < deadline and not (later is not None and first is not None and later > first):
            time.sleep(1.0)
            later = page.evaluate(NEWEST_LANE_END)
        assert later is not None and first is not None and later > first, (first, later)   # redrawn further on
    finally:
        proc.terminate()
        proc.wait(10)
