"""In a real browser (Debian's chromium), on saved virtual-time sim runs: Preview's replay of the
unchanged knobs reproduces the run within 2 % and shows its error; a Suggest the time limit cuts is
shown as partial (a warning, Continue, no Apply); good-hit stays <= 1 with sharing in flight beside it."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Page

from .test_browser import ARTIFACTS, chromium_page, serve  # type: ignore[import-not-found]


@pytest.fixture(scope="module")
def browser_page() -> Iterator[Page]:
    yield from chromium_page(2400)


def saved(path: Path, *args: str) -> Path:
    """A run saved as an operator saves one (in its own process: the browser's event loop is this one's)."""
    done = subprocess.run([sys.executable, "-m", "wavepp", "bench", "--policy", "wavepp", "--pp", "4", "--quiet",
                           "--save-run", str(path), *args], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return path


@pytest.fixture(scope="module")
def docs_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Eight long documents, sixteen clients: much of the reuse is shared in flight."""
    return saved(tmp_path_factory.mktemp("docs") / "docs.json", "--model", "glm-5.2", "--hardware", "b300",
                 "--workload", "docs:8", "--prompt-tokens", "16384", "--concurrency", "16", "--requests", "96")


def shot(page: Page, name: str) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / name), full_page=True)


def wait_text(page: Page, text: str, timeout_s: float, name: str = "whatif-trust-timeout.png") -> None:
    try:
        page.get_by_text(text).first.wait_for(timeout=timeout_s * 1000)
    except Exception as exc:
        shot(page, name)
        raise AssertionError(f"{text!r} not shown in {timeout_s:.0f} s; the page read:\n"
                             f"{page.inner_text('body')[-3000:]}") from exc


def metric_tiles(page: Page, labels: set[str], timeout_s: float) -> dict[str, str]:
    """The page's metric tiles (label -> value), read in one pass of the DOM once all ``labels`` are shown: a
    rerun that redraws the tiles between reading one and the next cannot leave a reader waiting on a gone one."""
    deadline = time.monotonic() + timeout_s
    while True:
        pairs = page.eval_on_selector_all("[data-testid='stMetric']", """tiles => tiles.map(t => [
            (t.querySelector("[data-testid='stMetricLabel']")?.innerText || "").trim(),
            (t.querySelector("[data-testid='stMetricValue']")?.innerText || "").trim()])""")
        tiles = dict(pairs)
        if labels <= tiles.keys():
            return tiles
        if time.monotonic() > deadline:
            shot(page, "whatif-trust-tiles-timeout.png")
            raise AssertionError(f"tiles {sorted(labels - tiles.keys())} not shown in {timeout_s:.0f} s: {tiles}")
        page.wait_for_timeout(250)


def settled(page: Page) -> None:
    """Streamlit's rerun has ended (its "running" status widget is gone): a widget's new value reached the app."""
    page.wait_for_timeout(300)
    page.locator("[data-testid='stStatusWidget']").wait_for(state="detached", timeout=60_000)


def knobs_page(page: Page, url: str) -> None:
    page.goto(url)
    page.get_by_text("Knobs", exact=True).first.click()
    page.get_by_role("button", name="Preview").wait_for(timeout=60_000)


def test_preview_of_the_unchanged_knobs_reproduces_the_saved_run(browser_page: Page, docs_file: Path) -> None:
    page = browser_page
    proc, url = serve("--run", str(docs_file))
    try:
        knobs_page(page, url)
        ring = page.get_by_label("ring (R) · waves in flight", exact=True)
        ring.fill("4")                      # a change to preview: its "current" column replays the run's knobs
        ring.press("Tab")
        page.get_by_role("button", name="Preview").click()
        wait_text(page, "the replay of the current knobs:", 180)
        text = page.inner_text("body")
        shot(page, "whatif-trust-preview.png")
        replayed = re.search(r"the replay of the current knobs: ([+-]\d+\.\d)%", text)
        assert replayed is not None, text
        assert abs(float(replayed.group(1))) <= 2.0, replayed.group(0)
        assert "replay error ±" in text and "anchored" not in text       # the sim's replay: never scaled
    finally:
        proc.terminate()
        proc.wait(10)


def test_a_suggest_cut_by_its_time_limit_is_shown_as_partial(browser_page: Page, tmp_path: Path) -> None:
    path = saved(tmp_path / "small.json", "--model", "llama-3-8b", "--hardware", "h200", "--workload", "reuse90",
                 "--prompt-tokens", "4096", "--concurrency", "16", "--requests", "240", "--kv-blocks", "3000")
    # One replay of its 240 requests: about 0.7 s on a quiet machine, so 19 settings take 13 s or more (48
    # requests, 0.15 s a replay, once fit all 19 in the 3 s limit on a quiet CI machine).
    page = browser_page
    proc, url = serve("--run", str(path))
    try:
        knobs_page(page, url)
        page.get_by_text("Preview and Suggest settings").first.click()
        limit = page.get_by_label("time limit (s)")
        limit.fill("3")                                             # 19 settings do not fit in 3 s
        limit.press("Tab")
        settled(page)          # under load a click racing the value's rerun can start the search with the default
        assert limit.input_value() == "3.00"
        page.get_by_role("button", name="Suggest").click()
        wait_text(page, "partial search", 120)
        shot(page, "whatif-trust-partial.png")
        text = page.inner_text("body")
        searched = re.search(r"partial search - (\d+) of 19 settings tried before the time limit", text)
        assert searched is not None and 1 <= int(searched.group(1)) < 19, text
        assert "nothing is proposed" in text
        assert page.locator("[data-testid='stAlertContentWarning']").filter(has_text="partial search").count() == 1
        assert page.locator("[data-testid='stAlertContentSuccess']").count() == 0
        assert page.get_by_role("button", name="Continue the search").count() == 1
        assert page.get_by_role("button", name="Apply suggested knobs").count() == 0
    finally:
        proc.terminate()
        proc.wait(10)


def test_good_hit_is_at_most_one_with_sharing_in_flight_beside_it(browser_page: Page, docs_file: Path) -> None:
    page = browser_page
    proc, url = serve("--run", str(docs_file))
    try:
        page.goto(url)
        page.get_by_text("Cache", exact=True).first.click()
        wait_text(page, "sharing in flight", 60)
        shot(page, "cache-good-hit.png")
        tiles = metric_tiles(page, {"good-hit rate", "sharing in flight", "shared in flight (tokens)",
                                    "reused from the cache (tokens)", "reusable (tokens)"}, 60)
        assert 0.9 <= float(tiles["good-hit rate"]) <= 1.0, tiles
        assert float(tiles["sharing in flight"]) > 0.05, tiles
        shared = int(tiles["shared in flight (tokens)"].replace(",", ""))
        assert shared > 0 and int(tiles["reused from the cache (tokens)"].replace(",", "")) <= \
            int(tiles["reusable (tokens)"].replace(",", ""))
    finally:
        proc.terminate()
        proc.wait(10)
