"""Every page renders - on recorded data, on an empty store, and with the store unreachable."""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from wavepp.dashboard.screens import PAGES
from wavepp.runtime.runs.runfile import load_runs

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
    if page == "Autopilot":                                         # a run without the autopilot: said so
        assert at.info and "had no autopilot" in at.info[0].value
    elif page != "Knobs":
        assert charts, f"{page} drew no chart"
    if page == "Knobs":
        assert at.info and "saved run" in at.info[0].value          # read-only source: Preview, no Apply
        assert {b.label for b in at.button} >= {"Preview", "Suggest"} and "Apply" not in {b.label for b in at.button}
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


def test_pipeline_page_shows_the_whole_run_as_the_bench_does(saved_run: Path, dashboard_env: None) -> None:
    """Today the tiles followed a window whose slider stopped short of the run and ended at the last
    execute step (0.275 vs the bench's 0.2536). Now: whole-run tiles equal the bench's figures, the
    slider reaches the whole run, and at full width the windowed tiles agree with them."""
    run = load_runs(saved_run)[0]
    at = run_page(f"run:{saved_run}", "Pipeline")
    tiles = {m.label: m.value for m in at.metric}
    makespan = run.figures["makespan_s"]
    assert tiles[f"efficiency (run, {makespan:.3f} s)"] == f"{run.figures['pipeline_efficiency']:.3f}"
    for s, b in enumerate(run.figures["bubble_fraction"]):
        assert tiles[f"stage {s} bubble (run)"] == f"{b:.3f}"
    slider = at.slider(key="pipeline_window")
    assert slider.max == pytest.approx(makespan, rel=1e-6)
    slider.set_value(slider.max).run()
    tiles = {m.label: m.value for m in at.metric}
    window = f"last {slider.max:.3f} s"
    assert tiles[f"efficiency ({window})"] == f"{run.figures['pipeline_efficiency']:.3f}"
    for s, b in enumerate(run.figures["bubble_fraction"]):
        assert tiles[f"stage {s} bubble ({window})"] == f"{b:.3f}"
    assert any(f"window of {slider.max:.3f} s" in h.value for h in at.subheader)   # the chart it drives


def test_pipeline_page_shows_recomputation_only_where_late_fallbacks_happened(
        tmp_path: Path, dashboard_env: None) -> None:
    """Stage 1 holds a fifth of the others' pool: the baseline finds missing prefixes late and runs
    discarded chunks again; its whole-run recomputation tiles are the bench's recompute_s. wavepp
    lowers boundaries at lease time and shows no such tiles."""
    from wavepp.runtime.bench.runs import BenchConfig, run_one
    from wavepp.runtime.engines.config import SimConfig
    from wavepp.runtime.engines.sim.engine import SimEngine
    from wavepp.runtime.runs.runfile import save_runs
    from wavepp.runtime.sources.workloads import parse_workload

    engine = SimEngine(SimConfig("llama-3-8b", "h200", 4, block_size=64, kv_blocks=[1000, 200, 1000, 1000]))
    cfg = BenchConfig(parse_workload("reuse90"), [8], ["trtllm-pp", "wavepp"], 64, prompt_tokens=2048)
    records = [run_one(engine, cfg, p, 8) for p in cfg.policies]
    path = tmp_path / "fallbacks.json"
    save_runs(path, [r.saved() for r in records])
    base, wave = records[0].figures, records[1].figures
    assert base.recompute_s[0] > 0 and not any(wave.recompute_s)
    at = run_page(f"run:{path}", "Pipeline")
    tiles = {m.label: m.value for m in at.metric}
    for s, lost in enumerate(base.recompute_s):
        assert tiles[f"stage {s} recomputing (run)"] == f"{lost / base.makespan_s:.1%}"
    at.sidebar.selectbox[0].set_value(records[1].run.id).run()
    tiles = {m.label: m.value for m in at.metric}
    assert tiles[f"efficiency (run, {wave.makespan_s:.3f} s)"] == f"{wave.pipeline_efficiency:.3f}"
    assert not [m for m in at.metric if "recomputing" in m.label]


def test_a_one_request_run_says_it_has_no_cadence(tmp_path: Path, dashboard_env: None) -> None:
    """Today: "0.00 ms" for p50 and p99 and two blank charts with no note."""
    from wavepp.runtime.bench.runs import BenchConfig, run_one
    from wavepp.runtime.engines.config import SimConfig
    from wavepp.runtime.engines.sim.engine import SimEngine
    from wavepp.runtime.runs.runfile import save_runs
    from wavepp.runtime.sources.workloads import parse_workload

    engine = SimEngine(SimConfig("llama-3-8b", "h200", 2, kv_blocks=[2000]))
    cfg = BenchConfig(parse_workload("reuse90"), [1], ["wavepp"], 1, prompt_tokens=2048)
    path = tmp_path / "one.json"
    save_runs(path, [run_one(engine, cfg, "wavepp", 1).saved()])
    at = run_page(f"run:{path}", "Admission")
    tiles = {m.label: m.value for m in at.metric}
    assert tiles["cadence p50"] == "-" and tiles["cadence p99"] == "-"
    assert any("Cadence needs two admission rounds" in i.value for i in at.info)
    assert not [c for c in at.get("plotly_chart") if "cadence" in str(c.proto.spec).lower()]


def test_pipeline_page_colours_every_bubble_by_its_cause(saved_run: Path, dashboard_env: None) -> None:
    """Issue 13: every idle interval coloured by cause in the lanes and as a stacked bar per stage,
    a one-line reading at the top, hover naming the cause and the wave waited for. Over the whole
    run the bars are the bench's idle causes (the same split)."""
    import json

    from wavepp.dashboard.charts import PALETTE, cause_name
    from wavepp.runtime.figures.idle_causes import MEANING

    run = load_runs(saved_run)[0]
    at = run_page(f"run:{saved_run}", "Pipeline")
    slider = at.slider(key="pipeline_window")
    slider.set_value(slider.max).run()
    makespan, causes = run.figures["makespan_s"], run.figures["idle_causes_s"]
    charts = {c.proto.id: json.loads(c.proto.spec) for c in at.get("plotly_chart")}
    bars = next(f for f in charts.values() if "idle time by cause" in str(f["layout"].get("title")))
    for trace in bars["data"]:
        cause = next(c for c in MEANING if cause_name(c) == trace["name"])
        assert trace["y"] == pytest.approx([st[cause] / makespan for st in causes], abs=1e-6)
    assert {t["name"] for t in bars["data"]} == {cause_name(c) for st in causes for c, v in st.items() if v > 0}
    lanes = next(f for f in charts.values() if any(t.get("name") == "execute (colour: its wave)" for t in f["data"]))
    steps = {t["name"]: t["marker"]["color"] for t in lanes["data"] if t["name"] in ("materialize", "send")}
    drain = next(t["marker"]["pattern"]["fgcolor"] for t in lanes["data"] if t["name"] == cause_name("drain"))
    assert len(set(steps.values()) | {drain}) == 3, (steps, drain)      # send, materialize, draining: 3 colours
    bubbles = [t for t in lanes["data"] if t["name"].startswith("idle: ")]
    assert {t["name"] for t in bubbles} == {t["name"] for t in bars["data"]}
    colours = [t["marker"]["pattern"]["fgcolor"] for t in bubbles]
    assert len(set(colours)) == len(colours) and not set(colours) & set(PALETTE)   # no wave colour
    assert all("waited for %{customdata[1]}" in t["hovertemplate"] for t in bubbles)
    assert any(str(w).startswith("wave ") for t in bubbles for _, w in t["customdata"])
    line = next(m.value for m in at.markdown if m.value.startswith("**Why the bubbles:**"))
    busiest = min(range(len(causes)), key=lambda s: (sum(causes[s].values()), s))
    assert f"stage {busiest} is the bottleneck (busy {1 - sum(causes[busiest].values()) / makespan:.1%})" in line
    own = max(causes[busiest], key=lambda c: causes[busiest][c])            # its own largest idle cause
    assert f"its own cause: {MEANING[own]}" in line or "its cause: busy computing" in line, line
    assert "Knob: " in line or "No knob addresses" in line, line


def test_the_cache_page_names_its_units_and_counts_from_zero(saved_run: Path, dashboard_env: None) -> None:
    """Issue 24, item 20: the stage table's columns said no unit (raw record keys), the evictions axis
    ran from -1 to 1 on a run without evictions."""
    at = run_page(f"run:{saved_run}", "Cache")
    assert not at.exception, [e.value for e in at.exception]
    table = at.dataframe[0].value
    assert list(table.columns) == ["stage", "capacity (blocks)", "cached (blocks)", "free (blocks)",
                                   "escrowed (blocks)", "leases (requests)", "evictions (blocks, since start)"]
    charts = [json.loads(c.proto.spec) for c in at.get("plotly_chart")]
    evictions = next(f for f in charts if "evictions" in str(f["layout"].get("title")))
    assert evictions["layout"]["yaxis"]["rangemode"] == "nonnegative"
    assert any("in blocks of 64 tokens" in c.value for c in at.caption)
