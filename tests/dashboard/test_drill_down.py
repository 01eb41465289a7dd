"""Issue 13 polish: a request drill-down (its admission round, chunks per stage, reuse boundary and
outcome), the prefill latency (TTFT) percentiles over time, and Compare as before/after windows
around each knob change."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from wavepp.runtime.figures.idle_causes import MEANING
from wavepp.runtime.runs.runfile import load_runs
from wavepp.telemetry import names as N

from .conftest import APP  # type: ignore[import-not-found]
from .test_app import run_page  # type: ignore[import-not-found]


def test_drill_down_shows_a_requests_way_through_the_run(saved_run: Path, dashboard_env: None) -> None:
    run = load_runs(saved_run)[0]
    request = next(s for s in run.spans if s["n"] == N.REQUEST)
    rid = request["a"][N.REQUEST_ID]
    at = run_page(f"run:{saved_run}", "Throughput and latency")
    at.text_input(key="drill_request").set_value(rid).run()
    assert not at.exception and not at.warning
    line = next(m.value for m in at.markdown if m.value.startswith(f"**{rid}**"))
    reused = request["a"][N.REUSED_TOKENS]
    assert f"reuse boundary: {reused:,} of" in line and "completed" in line, line
    specs = [json.loads(c.proto.spec) for c in at.get("plotly_chart")]
    waterfall = next(s for s in specs if any(t.get("name") == "lookup" for t in s["data"]))
    rows = {y for t in waterfall["data"] for y in t["y"]}
    assert {"prefill", "queued", "admission round", "stage 0", "stage 3"} <= rows, rows
    kinds = {t["name"] for t in waterfall["data"]}
    assert {"lookup", "lease", "escrow", "execute", "materialize"} <= kinds, kinds
    # Every wave that carried the request shows on every stage.
    waves = {p["a"][N.WAVE_ID] for p in run.spans if p["n"] == N.WAVE_PLAN and rid in p["a"].get(N.REQUEST_IDS, [])}
    executes = next(t for t in waterfall["data"] if t["name"] == "execute")
    assert len(executes["y"]) == 4 * len(waves)
    # On the request's own clock, and no stretch of its prefill unlabelled on stage 0: queued, then
    # waiting for a wave or in a step of one.
    assert waterfall["layout"]["xaxis"]["title"]["text"] == "seconds since the request arrived"
    spans = sorted((b, b + w) for t in waterfall["data"] if t["name"] != "prefill"
                   for y, b, w in zip(t["y"], numbers(t["base"]), numbers(t["x"]), strict=True)
                   if y in ("queued", "stage 0"))
    assert spans[0][0] == pytest.approx(0.0, abs=1e-9)
    reach = spans[0][1]
    for b, e in spans[1:]:
        assert b <= reach + 1e-6, (b, reach)           # each piece starts where the labelled time reached
        reach = max(reach, e)
    assert "waiting for a wave" in kinds or len(waves) == 1


def numbers(values: object) -> list[float]:
    """A plotly array as JSON gives it: a list, or a typed array ({"dtype", "bdata"} in base64)."""
    if isinstance(values, dict):
        import base64

        import numpy as np
        return [float(v) for v in np.frombuffer(base64.b64decode(values["bdata"]), dtype=values["dtype"])]
    return [float(v) for v in values]  # type: ignore[union-attr]


def test_drill_down_of_an_unknown_id_says_so(saved_run: Path, dashboard_env: None) -> None:
    at = run_page(f"run:{saved_run}", "Throughput and latency")
    at.text_input(key="drill_request").set_value("no-such-request" * 10).run()
    assert not at.exception
    message = at.warning[0].value if at.warning else ""
    assert message.startswith("No request 'no-such-requestno-such-… (152 characters) in this run (96 requests; "
                              "ids look like r"), message                 # a bounded echo, and what ids look like
    assert not [c for c in at.get("plotly_chart") if "lookup" in c.proto.spec]


def test_ttft_percentiles_over_time(saved_run: Path, dashboard_env: None) -> None:
    at = run_page(f"run:{saved_run}", "Throughput and latency")
    specs = [json.loads(c.proto.spec) for c in at.get("plotly_chart")]
    ttft = next(s for s in specs if "TTFT" in str(s["layout"].get("title")))
    names = [t["name"] for t in ttft["data"]]
    assert names[:2] == ["p50", "p95"] and set(names) <= {"p50", "p95", "p99"}   # p99 only where it is drawn


def test_compare_shows_the_windows_before_and_after_a_knob_change(knob_change_store: str,
                                                                  dashboard_env: None) -> None:
    os.environ["WAVEPP_DASHBOARD"] = f"store:{knob_change_store}"
    at = AppTest.from_file(APP, default_timeout=60)
    at.session_state["page"] = "Compare"
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert [s.value for s in at.subheader][:1] == ["Before and after a knob change"]
    change = at.selectbox(key="compare_change")
    assert len(change.options) == 1 and "max_wave_tokens=8192" in change.options[0], change.options
    table = at.table[0].value
    before, after = [c for c in table.columns if c.startswith(("before (", "after ("))]
    rows = dict(zip(table.index, zip(table[before], table[after], strict=True), strict=True))
    budgets = [int(v.replace(",", "")) for v in rows["wave budget (median, tokens)"]]
    assert budgets[1] <= 8192 < budgets[0], budgets                         # the new M caps the budget after
    assert float(rows["waves per second"][0]) > 0 and float(rows["waves per second"][1]) > 0
    causes = next(json.loads(c.proto.spec) for c in at.get("plotly_chart")
                  if "idle time by cause" in str(json.loads(c.proto.spec)["layout"].get("title")))
    assert [t["name"] for t in causes["data"]] == [before, after]
    # The run finished: its drain after each stage's last step is idle time, in the window after.
    drain = causes["data"][1]["y"][causes["data"][1]["x"].index(MEANING["drain"])]
    assert drain > 0


def test_drill_down_names_the_producer_a_follower_read_its_prefix_from(
        tmp_path: Path, dashboard_env: None) -> None:
    """Clients on one document no stage holds: the drill-down of a follower says whom it followed."""
    from wavepp.runtime.bench.runs import BenchConfig, run_one
    from wavepp.runtime.engines.config import SimConfig
    from wavepp.runtime.engines.sim.engine import SimEngine
    from wavepp.runtime.runs.runfile import save_runs
    from wavepp.runtime.sources.workloads import parse_workload
    engine = SimEngine(SimConfig("llama-3-8b", "h200", 2))
    cfg = BenchConfig(parse_workload("docs:1:suffix=256"), [3], ["wavepp"], 3, prompt_tokens=4096, keep_spans=True)
    path = tmp_path / "docs.json.gz"
    save_runs(path, [run_one(engine, cfg, "wavepp", 3).saved()])
    follower = next(s for s in load_runs(path)[0].spans if s["n"] == N.REQUEST and N.FOLLOWS in s["a"])
    at = run_page(f"run:{path}", "Throughput and latency")
    at.text_input(key="drill_request").set_value(follower["a"][N.REQUEST_ID]).run()
    line = next(m.value for m in at.markdown if m.value.startswith(f"**{follower['a'][N.REQUEST_ID]}**"))
    assert f"following {follower['a'][N.FOLLOWS]!r}" in line, line
