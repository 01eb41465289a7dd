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
        ring = page.get_by_label("ring (R) · waves in flight", exact=True)
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


def test_on_a_finished_run_knobs_are_written_for_the_next_run_and_suggest_shows_at_once(browser_page: Page) -> None:
    """A store whose run has finished: the page says a write waits for the next
    run and its button says so; after the write the version caption and History show it at once
    (they stayed at "version 1" for 35 s); Suggest shows its progress or result without another click."""
    import subprocess
    import sys

    from .conftest import redis_cluster  # type: ignore[import-not-found]

    page = browser_page
    with redis_cluster("finished") as store:
        done = subprocess.run([sys.executable, "-m", "wavepp", "bench", "--model", "llama-3-8b", "--hardware", "h200",
                               "--pp", "2", "--concurrency", "8", "--requests", "96", "--prompt-tokens", "4096",
                               "--workload", "reuse90", "--policy", "wavepp", "--quiet", "--store", store],
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        proc, url = serve("--store", store)
        try:
            page.goto(url)
            page.get_by_text("Knobs", exact=True).first.click()
            wait_text(page, "This run finished", 60)
            wait_text(page, "this run has stopped: a write waits for the next run", 30)
            caption = page.get_by_text("— this run has stopped").first.text_content() or ""
            version = int(caption.split("version ")[1].split(" ")[0])
            ring = page.get_by_label("ring (R) · waves in flight", exact=True)
            ring.fill("3")
            ring.press("Tab")
            page.get_by_role("button", name="Write for the next run").click()
            wait_text(page, f"Wrote version {version + 1} for the next run on this store", 30)
            wait_text(page, f"version {version + 1} — this run has stopped", 10)      # the caption, at once
            shot(page, "knobs-finished-run-written.png")

            page.get_by_role("button", name="Suggest").click()
            start = time.monotonic()
            page.locator("[data-testid='stProgress'], h3:has-text('Suggestion')").first.wait_for(timeout=15_000)
            assert time.monotonic() - start < 15
            wait_text(page, "Suggestion", 120)             # and its result, when the search ends
            shot(page, "knobs-finished-run-suggested.png")
        finally:
            proc.terminate()
            proc.wait(10)
