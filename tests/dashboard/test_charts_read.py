"""Charts an operator reads at a glance: every legend entry is drawn (the TTFT chart listed p99 and
never drew it), each percentile drawn wherever its bins hold enough completions, the throughput
curve with its mean over the run, and a title on every value axis."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from wavepp.dashboard.frames import min_samples
from wavepp.dashboard.screens.throughput import latency_percentiles

from .test_app import run_page  # type: ignore[import-not-found]
from .test_drill_down import numbers  # type: ignore[import-not-found]


def completions(n: int, end: float = 10.0) -> pd.DataFrame:
    rng = np.random.default_rng(7)
    return pd.DataFrame({"done": np.sort(rng.uniform(0.01, end, n)), "latency": rng.uniform(0.1, 1.0, n)})


def test_each_percentile_is_drawn_in_the_bins_that_hold_enough_for_it() -> None:
    lat, bins = latency_percentiles(completions(250), 10.0)
    assert bins == {50: 60, 95: 12, 99: 2}                   # p99 in two wide bins, not none
    drawn = lat.dropna()
    assert set(drawn["percentile"]) == {"p50", "p95", "p99"}
    assert len(drawn[drawn["percentile"] == "p99"]) >= 1
    lat, bins = latency_percentiles(completions(60), 10.0)
    assert bins[99] == 0 and "p99" not in set(lat["percentile"])     # too few completions: not drawn, not listed
    assert min_samples(99) > 60


def traces(at: object, title_part: str) -> dict[str, object]:
    specs = [json.loads(c.proto.spec) for c in at.get("plotly_chart")]  # type: ignore[attr-defined]
    return next(f for f in specs if title_part in str(f["layout"].get("title", "")))


def test_the_throughput_page_draws_what_its_legends_list(saved_run: Path, dashboard_env: None) -> None:
    at = run_page(f"run:{saved_run}", "Throughput and latency")
    latency = traces(at, "TTFT")
    for trace in latency["data"]:                             # every legend entry has a point on the chart
        assert any(not math.isnan(y) for y in numbers(trace["y"])), trace["name"]
        assert trace["name"] in str(latency["layout"]["title"])
    names = {t["name"] for t in latency["data"]}
    notes = " ".join(c.value for c in at.caption)
    for q in ("p50", "p95", "p99"):                            # a percentile not drawn says why
        assert q in names or f"{q} not drawn" in notes, (names, notes)
    rate = traces(at, "throughput")
    series = {t["name"]: t for t in rate["data"]}
    for name in ("input tok/s", "computed tok/s"):
        mean = next(t for n, t in series.items() if n.startswith(f"{name} mean"))
        assert numbers(mean["y"])[0] == np.mean(numbers(series[name]["y"])) and mean["line"]["dash"] == "dash"
    for fig in (latency, rate):
        assert fig["layout"]["xaxis"]["title"]["text"] == "time (s)"
        assert fig["layout"]["yaxis"]["title"]["text"] in ("TTFT (s)", "tokens/s")


@pytest.mark.parametrize("page", ["Pipeline", "Throughput and latency", "Admission", "Cache", "Compare"])
def test_every_value_axis_names_its_unit(page: str, saved_run: Path, dashboard_env: None) -> None:
    at = run_page(f"run:{saved_run}", page)
    for fig in (json.loads(c.proto.spec) for c in at.get("plotly_chart")):
        layout = fig["layout"]
        categorical = layout.get("yaxis", {}).get("type") == "category" or any(
            t.get("type") == "heatmap" or t.get("orientation") == "h" for t in fig["data"])
        if not categorical:                                    # lanes are named by their ticks
            assert layout.get("yaxis", {}).get("title", {}).get("text"), layout.get("title")
        assert layout.get("xaxis", {}).get("title", {}).get("text"), layout.get("title")
