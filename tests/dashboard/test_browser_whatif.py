"""In a real browser (Debian's chromium): preview a knob change on the live embedded sim, apply it,
and see the prediction next to what the runtime then did."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from playwright.sync_api import Page

from .test_browser import ARTIFACTS, chromium_page, serve  # type: ignore[import-not-found]


@pytest.fixture(scope="module")
def browser_page() -> Iterator[Page]:
    yield from chromium_page(2400)


def shot(page: Page, name: str) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / name), full_page=True)


def wait_text(page: Page, text: str, timeout_s: float) -> None:
    try:
        page.get_by_text(text).first.wait_for(timeout=timeout_s * 1000)
    except Exception:
        shot(page, "whatif-timeout.png")
        raise


def test_preview_a_change_then_apply_it_on_the_live_sim(browser_page: Page) -> None:
    page = browser_page
    proc, url = serve("--engine", "sim", "--pp", "4", "--concurrency", "16", "--prompt-tokens", "4096")
    try:
        page.goto(url)
        page.get_by_text("Knobs", exact=True).first.click()
        page.get_by_role("button", name="Preview").wait_for(timeout=60_000)
        time.sleep(3)                                  # the runtime finishes its first requests
        ring = page.get_by_label("ring", exact=True)
        ring.fill("4")
        ring.press("Tab")
        page.get_by_role("button", name="Preview").click()
        wait_text(page, "ring=4: replayed", 120)
        table = page.locator("[data-testid='stDataFrame']").first
        table.wait_for(timeout=10_000)
        shot(page, "whatif-preview.png")
        page.get_by_role("button", name="Apply these knobs").click()
        wait_text(page, "Wrote version", 30)
        wait_text(page, "After Apply: predicted vs observed", 30)
        wait_text(page, "requests that arrived since", 120)       # the observed window has enough requests
        shot(page, "whatif-after-apply.png")
        assert (ARTIFACTS / "whatif-after-apply.png").stat().st_size > 10_000
    finally:
        proc.terminate()
        proc.wait(10)
