"""Compare: runs from two files are never confused, and figures read as on the pages."""

from __future__ import annotations

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from wavepp.dashboard.screens.common import FIGURES
from wavepp.runtime.bench.runs import BenchConfig, run_one
from wavepp.runtime.engines.config import SimConfig
from wavepp.runtime.engines.sim.engine import SimEngine
from wavepp.runtime.runs.runfile import load_runs, save_runs
from wavepp.runtime.sources.workloads import parse_workload

from .test_app import run_page  # type: ignore[import-not-found]


@pytest.fixture(scope="module")
def other_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run with the same policy and concurrency as the recorded one, on another workload."""
    engine = SimEngine(SimConfig("llama-3-8b", "h200", 4, kv_blocks=[3000]))
    cfg = BenchConfig(parse_workload("cold"), [16], ["wavepp"], 48, prompt_tokens=4096)
    cfg.knobs = cfg.knobs.replace(max_wave_tokens=8192, min_wave_tokens=4096)
    path = tmp_path_factory.mktemp("other") / "other.json"
    save_runs(path, [run_one(engine, cfg, "wavepp", 16).saved()])
    return path


def rows(at: AppTest) -> dict[str, list[str]]:
    df = at.dataframe[0].value
    return {r["figure"]: [r["Run A"], r["Run B"]] for _, r in df.iterrows()}


def test_a_run_from_a_second_file_is_that_run(saved_run: Path, other_file: Path, dashboard_env: None) -> None:
    """Today a second file's "wavepp c=16" showed the first file's run as Run B, ratio 1.000x."""
    at = run_page(f"run:{saved_run}", "Compare")
    at.text_input(key="compare_file").input(str(other_file)).run()
    b = at.selectbox(key="compare_b")
    assert len(b.options) == 3 and str(other_file) in b.options[2]
    b.set_value(2).run()
    first, other = load_runs(saved_run)[0], load_runs(other_file)[0]
    got = rows(at)["input tok/s"]
    assert got == [FIGURES["input_tokens_per_s"].format(r.figures["input_tokens_per_s"]) for r in (first, other)]
    ratio = first.figures["input_tokens_per_s"] / other.figures["input_tokens_per_s"]
    assert at.metric[0].value == f"{ratio:.3f}x" and at.metric[0].value != "1.000x"


def test_compare_uses_the_pages_names_units_and_precision(saved_run: Path, dashboard_env: None) -> None:
    """Today: raw field names with 4 decimals (admission latency p99 0.0008 vs 0.0007 for 0.78 vs 0.74 ms)."""
    at = run_page(f"run:{saved_run}", "Compare")
    table = rows(at)
    runs = load_runs(saved_run)
    assert table["admission latency p99 (ms)"] == [f"{r.figures['admission_latency_p99_s'] * 1e3:,.2f}" for r in runs]
    assert "admission_latency_p99_s" not in table
    admission = run_page(f"run:{saved_run}", "Admission")
    tile = next(m.value for m in admission.metric if m.label == "admission latency p99")
    assert tile == table["admission latency p99 (ms)"][0] + " ms"             # the first run, as on its page


def test_two_runs_on_one_time_axis_with_a_ratio_for_every_figure(saved_run: Path, other_file: Path,
                                                                 dashboard_env: None) -> None:
    """A 41 s and a 90 s run were drawn as strips of equal length, with a ratio for one figure only."""
    import json

    at = run_page(f"run:{saved_run}", "Compare")
    at.text_input(key="compare_file").input(str(other_file)).run()
    at.selectbox(key="compare_b").set_value(2).run()
    first, other = load_runs(saved_run)[0], load_runs(other_file)[0]
    df = at.dataframe[0].value
    ratios = dict(zip(df["figure"], df["A / B"], strict=True))
    for key, name in (("input_tokens_per_s", "input tok/s"), ("makespan_s", "makespan (s)")):
        a, b = first.figures[key], other.figures[key]
        assert ratios[next(f for f in ratios if f.startswith(name.split(" (")[0]))] == f"{a / b:.3f}x", (key, ratios)
    numeric = [k for k in ("input_tokens_per_s", "computed_tokens_per_s", "pipeline_efficiency", "makespan_s",
                           "waves") if first.figures.get(k) and other.figures.get(k)]
    assert sum(r != "-" for r in ratios.values()) >= len(numeric)
    strips = [json.loads(c.proto.spec) for c in at.get("plotly_chart")
              if any(t.get("type") == "heatmap" for t in json.loads(c.proto.spec)["data"])]
    assert len(strips) == 2
    ranges = [tuple(s["layout"]["xaxis"]["range"]) for s in strips]
    assert ranges[0] == ranges[1] and ranges[0][0] == 0.0                 # one time axis for both runs
    longest = max(r.figures["makespan_s"] for r in (first, other))
    assert ranges[0][1] >= longest * 0.99
