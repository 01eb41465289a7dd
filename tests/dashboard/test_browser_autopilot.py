"""The Autopilot page in a real browser (Debian's chromium), on the embedded sim demo run with the autopilot
advising: its settings, its decisions as they come, and Freeze / Resume written to the runtime's record."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from playwright.sync_api import Page

from .test_browser import chromium_page, serve  # type: ignore[import-not-found]
from .test_browser_whatif_trust import settled, wait_text  # type: ignore[import-not-found]

DECIDED_S = 180          # page load, the demo's first windows of 2 s, on a loaded CI machine


@pytest.fixture(scope="module")
def page() -> Iterator[Page]:
    yield from chromium_page(1800)


def test_the_autopilot_page_shows_its_decisions_and_freezes_it(page: Page) -> None:
    proc, url = serve("--engine", "sim", "--autopilot", "advise", "--autopilot-window", "2")
    try:
        page.goto(url)
        page.get_by_text("Autopilot", exact=True).first.click()
        wait_text(page, "Mode advise", DECIDED_S, "autopilot-timeout.png")
        wait_text(page, "windows decided", DECIDED_S, "autopilot-timeout.png")
        page.locator(".js-plotly-plot").first.wait_for(timeout=60_000)     # the timeline is drawn
        settled(page)
        page.get_by_role("button", name="Freeze").click()
        wait_text(page, "Written: the autopilot reads it", 60, "autopilot-timeout.png")
        wait_text(page, "frozen: frozen by the operator", 60, "autopilot-timeout.png")
        settled(page)
        page.get_by_role("button", name="Resume").click()
        wait_text(page, "Written: the autopilot reads it", 60, "autopilot-timeout.png")
    finally:
        proc.terminate()
        proc.wait(10)
