"""A real headless browser (Debian's chromium, driven by playwright) loads the running dashboard."""

from __future__ import annotations

import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Page, sync_playwright

from .conftest import free_port  # type: ignore[import-not-found]

CHROMIUM = "/usr/bin/chromium"
FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
         "--no-first-run", "--enable-unsafe-swiftshader"]
ARTIFACTS = Path(__file__).resolve().parents[1] / "artifacts"
WAVEPP = str(Path(sys.executable).parent / "wavepp")


def serve(*args: str) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    log = open(ARTIFACTS.parent / "artifacts" / f"dashboard-{port}.log", "wb") if ARTIFACTS.exists() else None
    proc = subprocess.Popen([WAVEPP, "dashboard", "--port", str(port), *args],
                            stdout=log or subprocess.DEVNULL, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/"
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"wavepp dashboard exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(url + "_stcore/health", timeout=1) as r:
                if r.status == 200:
                    return proc, url
        except OSError:
            time.sleep(0.2)
    proc.kill()
    raise RuntimeError("dashboard did not come up")


def chromium_page(height: int) -> Iterator[Page]:
    """A page of Debian's headless chromium, 1500 px wide (for module fixtures: yields, then closes)."""
    if not Path(CHROMIUM).exists():
        pytest.fail("chromium is not installed: `make test` installs Debian's chromium package")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        yield browser.new_page(viewport={"width": 1500, "height": height})
        browser.close()


@pytest.fixture(scope="module")
def page() -> Iterator[Page]:
    yield from chromium_page(1400)


def lanes_with_data(page: Page, num_stages: int, timeout_s: float = 90) -> set[str]:
    """Wait until the Pipeline timeline shows bars, then return the lane labels of that chart."""
    try:
        page.wait_for_selector(".js-plotly-plot .barlayer .point", state="attached", timeout=timeout_s * 1000)
    except Exception:
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "timeout.png"), full_page=True)
        raise
    first = page.locator(".js-plotly-plot").first
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        labels = {t.text_content() or "" for t in first.locator(".ytick text").all()}
        if len({x for x in labels if x.startswith("stage ")}) == num_stages:
            return labels
        time.sleep(0.25)
    return labels


def hover_a_bubble(page: Page) -> str:
    """Hover the widest bubble (an idle interval) of the Pipeline lanes; the hover label's text."""
    lanes = page.locator(".js-plotly-plot").first
    bubbles = lanes.locator(".barlayer .trace").first.locator(".point path")   # idle traces are drawn first
    widest = max(bubbles.all(), key=lambda p: (p.bounding_box() or {"width": 0})["width"])
    widest.scroll_into_view_if_needed()
    box = widest.bounding_box()
    assert box is not None
    page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    label = lanes.locator(".hoverlayer .hovertext")
    label.first.wait_for(timeout=10_000)
    return " ".join(t.text_content() or "" for t in label.first.locator("text").all())


def test_pipeline_page_shows_one_lane_per_stage_with_data(page: Page, saved_run: Path) -> None:
    proc, url = serve("--run", str(saved_run))
    try:
        page.goto(url)
        labels = lanes_with_data(page, 4)
        assert {f"stage {s}" for s in range(4)} <= labels
        bars = page.locator(".js-plotly-plot").first.locator(".barlayer .point").count()
        assert bars > 20, bars
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "pipeline.png"), full_page=True)
        assert (ARTIFACTS / "pipeline.png").stat().st_size > 10_000
        assert page.get_by_text("Why the bubbles:").count() == 1
        page.wait_for_selector(".js-plotly-plot .heatmaplayer image", timeout=30_000)   # the whole run's strip
        assert page.get_by_role("button", name="Deploy").count() == 0            # viewer toolbar
        cause = hover_a_bubble(page)
        assert cause.startswith("idle: ") and "waited for" in cause, cause
        page.screenshot(path=str(ARTIFACTS / "pipeline-bubble-hover.png"))
    finally:
        proc.terminate()
        proc.wait(10)


def test_embedded_live_dashboard_draws_the_running_pipeline(page: Page) -> None:
    """`wavepp dashboard` with no source: the torch runtime runs beside it and its lanes fill live."""
    proc, url = serve("--pp", "2", "--concurrency", "8", "--prompt-tokens", "512")
    try:
        page.goto(url)
        labels = lanes_with_data(page, 2)
        assert {f"stage {s}" for s in range(2)} <= labels
        caption = page.get_by_text("newest span ended").first.text_content() or ""
        age = float(caption.split("ended ")[1].split(" s")[0])
        assert age < 3.0, caption
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "pipeline-live.png"), full_page=True)
    finally:
        proc.terminate()
        proc.wait(10)


def test_compare_shows_before_and_after_a_knob_change_live(page: Page, knob_change_store: str) -> None:
    """Compare in live mode: the windows before and after the knob change, side by side."""
    proc, url = serve("--store", knob_change_store)
    try:
        page.goto(url)
        page.get_by_text("Compare", exact=True).first.click()
        page.get_by_text("Before and after a knob change").wait_for(timeout=90_000)
        table = page.locator("table").filter(has_text="wave budget (median, tokens)")
        table.wait_for(timeout=60_000)
        headers = [h.text_content() or "" for h in table.locator("th").all()]
        assert any(h.startswith("before (") for h in headers) and any(h.startswith("after (") for h in headers)
        row = table.locator("tr").filter(has_text="wave budget (median, tokens)")
        cells = [c.text_content() for c in row.locator("td").all()]
        before_budget, after_budget = (int((c or "").replace(",", "")) for c in cells[:2])
        assert after_budget <= 8192 < before_budget, cells     # the new M (8192) caps every budget after
        # Windows of different lengths compare by rate, and the first one leaves the warm-up out.
        rows = [r.locator("th").first.text_content() or "" for r in table.locator("tbody tr").all()]
        assert "waves per second" in rows and "waves" not in rows, rows
        before = next(h for h in headers if h.startswith("before ("))
        assert float(before.removeprefix("before (").split("-")[0]) > 0.0, before      # not from the first arrival
        assert page.get_by_text("counts are compared as rates").count() == 1
        page.locator(".js-plotly-plot").first.wait_for(timeout=60_000)
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "compare-before-after.png"), full_page=True)
    finally:
        proc.terminate()
        proc.wait(10)
