"""The Pipeline page in headless chromium: the window the slider shows is
the window every tile, the reading and the charts say; a stage's bubble tile, its bars in the
idle-cause chart and the reading are one figure (one definition of idle); the reading names the
bottleneck first. On a saved run and on a live one."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Page

from .test_browser import chromium_page, lanes_with_data, serve  # type: ignore[import-not-found]

IDLE_BY_STAGE = """() => {
  const plot = [...document.querySelectorAll('.js-plotly-plot')]
    .find(p => String(p.layout?.title?.text ?? p.layout?.title ?? '').includes('idle time by cause'));
  if (!plot || !plot.data) return null;
  const out = {}, causes = {};
  for (const trace of plot.data) trace.x.forEach((lane, i) => {
    out[lane] = (out[lane] || 0) + trace.y[i];
    (causes[lane] = causes[lane] || {})[trace.name] = trace.y[i];
  });
  return {title: String(plot.layout.title.text ?? plot.layout.title), idle: out, causes: causes};
}"""


@pytest.fixture(scope="module")
def page() -> Iterator[Page]:
    yield from chromium_page(1400)


# The slider, the tiles and the reading in one pass of the DOM (one state of the page): read one locator at a
# time, a rerun of the live page could redraw them between two reads and leave a reader waiting on a gone tile.
PAGE_TEXT = """() => {
  const text = e => (e?.textContent || "").trim();
  const tiles = [...document.querySelectorAll('[data-testid="stMetric"]')].map(t => [
    text(t.querySelector('[data-testid="stMetricLabel"]')), text(t.querySelector('[data-testid="stMetricValue"]'))]);
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  let reading = "";
  for (let n = walker.nextNode(); n; n = walker.nextNode())
    if (n.nodeValue.includes("Why the bubbles:")) { reading = text(n.parentElement?.parentElement); break; }
  return {slider: text(document.querySelector('[data-testid="stSliderThumbValue"]')), tiles: tiles, reading: reading};
}"""


def page_figures(page: Page) -> dict[str, object]:
    """What the page says about its detail window: the slider's value, the tiles, the reading, the chart."""
    page.wait_for_function(IDLE_BY_STAGE, timeout=60_000)
    got = page.evaluate(f"() => ({{...({PAGE_TEXT})(), chart: ({IDLE_BY_STAGE})()}})")
    tiles = {label: float(value or "nan") for label, value in got["tiles"]}
    return {"slider": float(got["slider"] or "nan"), "tiles": tiles, "reading": got["reading"], "chart": got["chart"]}


def check_one_window_one_idle(got: dict[str, object], num_stages: int) -> None:
    slider = got["slider"]
    assert isinstance(slider, float)
    tiles = got["tiles"]
    assert isinstance(tiles, dict)
    windowed = {k: v for k, v in tiles.items() if "(last " in k}
    assert len(windowed) == num_stages + 1, tiles
    assert all(len(k) <= 30 for k in tiles), tiles           # short enough for a tile (none truncated)
    for label in windowed:                               # every tile says the slider's window
        said = float(re.search(r"\(last ([0-9.]+) s\)", label).group(1))  # type: ignore[union-attr]
        assert said == pytest.approx(slider, abs=6e-4), (label, slider)
    chart = got["chart"]
    assert isinstance(chart, dict), "no idle-cause chart"
    said = float(re.search(r"last ([0-9.]+) s", chart["title"]).group(1))  # type: ignore[union-attr]
    assert said == pytest.approx(slider, abs=6e-4)
    reading = str(got["reading"])
    assert f"In the last {slider:.3f} s" in reading or f"In the last {said:.3f} s" in reading, reading
    bubble = [windowed[next(k for k in windowed if k.startswith(f"stage {s} bubble"))] for s in range(num_stages)]
    for s in range(num_stages):                          # the tile is the sum of the chart's causes
        assert chart["idle"].get(f"stage {s}", 0.0) == pytest.approx(bubble[s], abs=6e-4), (s, chart, bubble)
    m = re.search(r"stage (\d+) is the bottleneck \(busy ([0-9.]+)%\)", reading)
    assert m is not None, reading
    bottleneck, busy = int(m.group(1)), float(m.group(2)) / 100
    assert bubble[bottleneck] == pytest.approx(min(bubble), abs=6e-4)
    assert busy == pytest.approx(1 - bubble[bottleneck], abs=6e-4)
    eff = windowed[next(k for k in windowed if k.startswith("efficiency"))]
    assert eff == pytest.approx(busy, abs=6e-4)
    check_the_bottleneck_explained_by_its_own_cause(reading, bottleneck, chart["causes"].get(f"stage {bottleneck}", {}))


def check_the_bottleneck_explained_by_its_own_cause(reading: str, bottleneck: int, causes: dict[str, float]) -> None:
    """The reading explains the bottleneck by the largest of its own bars in the cause chart (or, when
    it hardly idles, as busy computing), names the stage it starves and the knob for that cause."""
    own = re.search(r"its own cause: (.+?) \(idle ([0-9.]+)%", reading)
    if own is None:
        assert "its cause: busy computing" in reading, reading
    else:
        largest = max(causes, key=lambda c: causes[c])
        assert largest == f"idle: {own.group(1)}", (reading, causes)
    fed = re.search(r"It starves (?:no stage: )?stage (\d+)", reading)
    assert fed is not None and int(fed.group(1)) != bottleneck, reading
    assert re.search(r"Knob: (raise|lower) [a-z_]+ - ", reading) or "No knob addresses this cause." in reading


def test_a_saved_run_says_one_window_and_one_idle(page: Page, saved_run: Path) -> None:
    proc, url = serve("--run", str(saved_run))
    try:
        page.goto(url)
        lanes_with_data(page, 4)
        check_one_window_one_idle(page_figures(page), 4)
    finally:
        proc.terminate()
        proc.wait(10)


def test_a_live_run_says_one_window_and_one_idle(page: Page) -> None:
    """The embedded sim runtime on the wall clock: the page reruns as spans arrive and its run grows;
    after each rerun the slider and every figure still say one window."""
    proc, url = serve("--engine", "sim", "--pp", "2", "--concurrency", "8", "--time-scale", "20")
    try:
        page.goto(url)
        lanes_with_data(page, 2)
        seen = set()
        deadline = time.monotonic() + 60
        while len(seen) < 3 and time.monotonic() < deadline:
            got = page_figures(page)
            if got["chart"] is None or "Why the bubbles" not in str(got["reading"]):
                time.sleep(0.5)
                continue
            try:
                check_one_window_one_idle(got, 2)
            except AssertionError:
                time.sleep(0.5)          # read while the page was half redrawn: the next read decides
                got = page_figures(page)
                check_one_window_one_idle(got, 2)
            seen.add(got["slider"])
            time.sleep(2.0)
        assert len(seen) >= 2, seen      # the window moved as the run grew, and stayed one window
    finally:
        proc.terminate()
        proc.wait(10)


def test_the_reading_names_a_knob_and_previews_it_in_one_click(page: Page, saved_run: Path) -> None:
    """The reading names the bottleneck's own cause and a knob; its Preview button replays the run with
    that knob moved and shows the prediction on the Pipeline page."""
    proc, url = serve("--run", str(saved_run))
    try:
        page.goto(url)
        lanes_with_data(page, 4)
        got = page_figures(page)
        reading = str(got["reading"])
        knob = re.search(r"Knob: (raise|lower) ([a-z_]+) - ", reading)
        assert knob is not None, reading
        button = page.get_by_role("button", name=re.compile(rf"^Preview {knob.group(2)} \d+ → \d+"))
        button.click()
        page.get_by_text(re.compile(rf"^{knob.group(2)}=\d+.*: replayed ")).first.wait_for(timeout=120_000)
    finally:
        proc.terminate()
        proc.wait(10)
