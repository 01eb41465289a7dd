"""The Knobs page's Preview and Suggest: they run off the render path and show their result side by
side; a preview that cannot run says why; bad input starts nothing."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from streamlit.testing.v1 import AppTest

from wavepp.runtime.bench.runs import BenchConfig, run_one
from wavepp.runtime.control.knobs import Knobs
from wavepp.runtime.engines.calibrate import FORMAT
from wavepp.runtime.engines.config import SimConfig
from wavepp.runtime.engines.coordination import DEFAULT_COSTS
from wavepp.runtime.engines.sim.engine import SimEngine
from wavepp.runtime.runs.runfile import save_runs
from wavepp.runtime.sources.workloads import parse_workload
from wavepp.runtime.whatif.preview import MIN_ARRIVALS
from wavepp.telemetry import names as N

from .conftest import APP, live_run, redis_cluster  # type: ignore[import-not-found]


@pytest.fixture(scope="module")
def ring1_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A sim run with one wave in flight on four stages (a change of the ring must help)."""
    engine = SimEngine(SimConfig("llama-3-8b", "h200", 4, kv_blocks=[3000]))
    knobs = Knobs(max_wave_tokens=8192, min_wave_tokens=4096, ring=1)
    cfg = BenchConfig(parse_workload("reuse90"), [16], ["wavepp"], 64, prompt_tokens=4096, knobs=knobs)
    path = tmp_path_factory.mktemp("whatif") / "ring1.json"
    save_runs(path, [run_one(engine, cfg, "wavepp", 16).saved()])
    return path


def knobs_page(source: str) -> AppTest:
    os.environ["WAVEPP_DASHBOARD"] = source
    at = AppTest.from_file(APP, default_timeout=60)
    at.session_state["page"] = "Knobs"
    at.run()
    assert not at.exception
    return at


def button(at: AppTest, label: str):  # type: ignore[no-untyped-def]
    return next(b for b in at.button if b.label == label)


def field(at: AppTest, label: str):  # type: ignore[no-untyped-def]
    """A text field by its label, or a knob's by its name (its label is in words: knob_label)."""
    return next(w for w in at.text_input if w.label == label or w.key == f"knob_{label}")


def wait_for_result(at: AppTest, timeout_s: float = 90) -> AppTest:
    """Rerun the page until the job's result (or its error) is drawn instead of its progress."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        job = at.session_state["whatif_job"] if "whatif_job" in at.session_state else None
        if job is not None and not job.running:
            at.run()
            assert not at.exception
            return at
        time.sleep(0.2)
    raise AssertionError("the what-if job did not finish")


def table(at: AppTest, first_column: str) -> dict[str, list[str]]:
    frame = next(d.value for d in at.dataframe if d.value.columns[0] == "figure" and first_column in d.value.columns)
    return {row["figure"]: list(row)[1:] for _, row in frame.iterrows()}


def test_preview_of_a_saved_sim_run_shows_both_settings_side_by_side(ring1_run: Path, dashboard_env: None) -> None:
    at = knobs_page(f"run:{ring1_run}")
    assert [b.label for b in at.button if b.label in ("Apply", "Preview")] == ["Preview"]   # read-only: no Apply
    field(at, "ring").input("8")
    button(at, "Preview").click().run()
    assert "whatif_job" in at.session_state
    wait_for_result(at)
    assert not at.error, [e.value for e in at.error]
    assert any("ring=8: replayed the 64 requests of the last 60 s" in c.value for c in at.caption)
    rows = table(at, "proposed")
    current, proposed, change = rows["input tok/s"]
    assert float(proposed.replace(",", "")) > 1.5 * float(current.replace(",", ""))
    assert change.startswith("+")
    assert "idle: ring full (no wave slot) (ring_full)" in rows and "prefill p95 (s)" in rows   # words, seconds
    check = next(c.value for c in at.caption if c.value.startswith("the run itself over the same arrivals"))
    assert f"{current} input tok/s" in check or "(the replay of the current knobs: +0.0%" in check, check


def profile_file(tmp_path: Path) -> Path:
    coef = {"c": 2e-3, "c_chunk": 1e-4, "gamma": 1e-7, "beta": 2e-5, "alpha_lx": 1e-9, "alpha_xx": 2e-9}
    path = tmp_path / "profile.json"
    path.write_text(json.dumps({
        "format": FORMAT, "engine": "torch", "model": "tiny-llama", "pp": 4, "block_size": 64, "vocab_size": 32000,
        "max_context": 8192, "capacities": [3000] * 4, "threads": 1, "stages": [coef] * 4, "samples": [[]] * 4,
        "coordination": DEFAULT_COSTS.as_dict()}))
    return path


def test_preview_of_a_torch_run_without_and_with_calibration(ring1_run: Path, tmp_path: Path,
                                                             dashboard_env: None) -> None:
    data = json.loads(ring1_run.read_text())
    data["runs"][0]["meta"] |= {"engine": "torch", "model": "tiny-llama", "hardware": "cpu", "sim": None}
    torch_run = tmp_path / "torch.json"
    torch_run.write_text(json.dumps(data))
    at = knobs_page(f"run:{torch_run}")
    field(at, "ring").input("8")
    button(at, "Preview").click().run()
    errors = [e.value for e in at.error]
    assert any("Cannot preview: no calibration" in e and "wavepp calibrate --engine torch" in e for e in errors), errors
    assert "whatif_job" not in at.session_state
    field(at, "calibration profile (wavepp calibrate)").input(str(profile_file(tmp_path)))
    button(at, "Preview").click().run()
    wait_for_result(at)
    assert not at.error, [e.value for e in at.error]
    assert any("in the sim calibrated on the torch engine" in c.value for c in at.caption)
    assert "input tok/s" in table(at, "proposed")


def test_suggest_proposes_a_setting_and_applies_nothing(ring1_run: Path, dashboard_env: None) -> None:
    at = knobs_page(f"run:{ring1_run}")
    at.number_input(key="whatif_limit").set_value(600).run()   # a loaded machine must not cut the search short
    button(at, "Suggest").click().run()
    wait_for_result(at, 500)
    assert not at.error, [e.value for e in at.error]
    line = at.success[0].value
    assert line.startswith("goal highest input throughput: set ") and "predicted input throughput +" in line
    assert "ring=" in line
    assert "input tok/s" in table(at, "suggested")
    assert not any(b.label == "Apply suggested knobs" for b in at.button)     # a saved run: read-only


def test_bad_input_in_the_form_starts_no_preview(ring1_run: Path, dashboard_env: None) -> None:
    at = knobs_page(f"run:{ring1_run}")
    field(at, "ring").input("eight")
    field(at, "min_wave_tokens").input("65536")
    button(at, "Preview").click().run()
    errors = [e.value for e in at.error]
    assert any("expected an integer" in e for e in errors) and any("b_min 65536 > M 8192" in e for e in errors)
    assert "Nothing was previewed: fix the fields marked above" in at.warning[0].value
    assert "whatif_job" not in at.session_state


@pytest.fixture
def store_url(dashboard_env: None) -> Iterator[str]:
    with redis_cluster("whatif") as url:
        yield url


def test_preview_on_a_live_store_replays_the_running_sim_it_describes(store_url: str) -> None:
    """Today a live store source could not preview ("a live store holds no engine description"). Now
    the runtime describes its run in the store when it starts: Preview on a running real-time sim
    replays its recent arrivals in that sim (its model, hardware and stages) and offers Apply."""
    thread, out, source, snap = live_run(store_url, 5)
    try:
        deadline = time.monotonic() + 60
        while sum(s["n"] == N.REQUEST for s in snap.spans) < MIN_ARRIVALS and time.monotonic() < deadline:
            time.sleep(0.1)
            snap = source.snapshot()
        assert thread.is_alive(), "the run ended before the preview: it must preview a running runtime"
        at = knobs_page(f"store:{store_url}")
        field(at, "ring").input("8")
        button(at, "Preview").click().run()
        assert "whatif_job" in at.session_state, [e.value for e in at.error]
        wait_for_result(at)
        assert not at.error, [e.value for e in at.error]
        caption = next(c.value for c in at.caption if c.value.startswith("ring=8: replayed the "))
        assert "in the sim: llama-3-8b on h200, PP4" in caption, caption
        current, proposed, _ = table(at, "proposed")["input tok/s"]
        assert float(current.replace(",", "")) > 0 and float(proposed.replace(",", "")) > 0
        assert any(b.label == "Apply these knobs" for b in at.button)            # live: the change can be applied
    finally:
        thread.join(120)
    assert out["rec"].figures.completed == 160


def test_a_store_written_by_an_older_runtime_says_why_it_cannot_preview(store_url: str) -> None:
    """A run on the store without its description (a runtime from before it published one): one line
    saying so, and nothing starts."""
    engine = SimEngine(SimConfig("llama-3-8b", "h200", 2, kv_blocks=[2000], store_url=store_url))
    cfg = BenchConfig(parse_workload("reuse90"), [4], ["wavepp"], 24, prompt_tokens=2048)
    run_one(engine, cfg, "wavepp", 4)
    cluster = store_url.split("cluster=")[1]
    client = redis.Redis(db=13)
    assert client.delete(f"wavepp:{{{cluster}}}:runs:meta") == 1                 # as an older runtime left it
    client.close()
    at = knobs_page(f"store:{store_url}")
    field(at, "ring").input("8")
    button(at, "Preview").click().run()
    [error] = [e.value for e in at.error]
    assert error.startswith("Cannot preview: this source does not say which engine, model and hardware ran (the "
                            "store holds no description of this run"), error
    assert "\n" not in error
    assert "whatif_job" not in at.session_state
