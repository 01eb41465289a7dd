"""The ``wavepp`` command: one-line usage errors with exit 2, and a small sim bench end to end."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from wavepp.runtime.cli import main
from wavepp.runtime.cli.args import RunFailed, write_text

WAVEPP = Path(sys.executable).parent / "wavepp"
SMALL = ["--model", "llama-3-8b", "--hardware", "h200", "--pp", "2", "--concurrency", "4", "--requests", "16",
         "--prompt-tokens", "2048", "--quiet"]

RUN_KEYS = {
    "policy", "engine", "model", "hardware", "pp", "concurrency", "workload", "requests", "input_tokens_per_s",
    "computed_tokens_per_s", "makespan_s", "pipeline_efficiency", "bubble_fraction", "admission_interval_p50_s",
    "admission_interval_p99_s", "admission_latency_p99_s", "prefill_latency_p50_s", "prefill_latency_p95_s",
    "good_hit_rate", "fallbacks",
}


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}


@pytest.mark.parametrize(("args", "mentions"), [
    (["bench", "--model", "nope"], "nope"),
    (["bench", "--hardware", "nope"], "nope"),
    (["bench", "--policy", "wavepp,nope"], "nope"),
    (["bench", "--concurrency", "-4"], "-4"),
    (["bench", "--concurrency", "8,,x"], "8,,x"),
    (["bench", "--workload", "bogus"], "bogus"),
    (["bench", "--workload", "suffix:0"], "suffix:0"),
    (["bench", "--pp", "0"], "--pp"),
    (["bench", "--pp", "4", "--kv-blocks", "1,2"], "kv blocks"),
    (["bench", "--min-wave-tokens", "20000"], "20000"),
    (["bench", "--prompt-tokens", "100"], "prompt-tokens"),
    (["bench", "--bogus-flag"], "--bogus-flag"),
    ([], "command"),
])
def test_bad_value_is_one_line_and_exit_2(args: list[str], mentions: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Each bad value: return code 2, exactly one stderr line 'wavepp: error: ...' naming it, no traceback."""
    rc = main(args)
    out, err = capsys.readouterr()
    assert rc == 2
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("wavepp: error: ")
    assert mentions in lines[0]
    assert "Traceback" not in err and out == ""


def test_bench_end_to_end(tmp_path: Path) -> None:
    """A small reuse90 sim bench through the console script writes both runs' figures and a per-stage trace."""
    fig, trace = tmp_path / "f.json", tmp_path / "t.json"
    proc = subprocess.run([str(WAVEPP), "bench", *SMALL, "--workload", "reuse90", "--json", str(fig),
                           "--trace", str(trace)], capture_output=True, text=True, timeout=120, cwd=tmp_path,
                          env=_env())
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr

    runs = json.loads(fig.read_text())["runs"]
    assert [r["policy"] for r in runs] == ["wavepp", "trtllm-pp"]
    for r in runs:
        assert RUN_KEYS <= r.keys()
        assert (r["engine"], r["model"], r["hardware"], r["pp"], r["concurrency"], r["workload"], r["requests"]) == \
               ("sim", "llama-3-8b", "h200", 2, 4, "reuse90", 16)
        assert len(r["bubble_fraction"]) == 2 and all(0 <= b <= 1 for b in r["bubble_fraction"])
        assert 0 < r["pipeline_efficiency"] <= 1
        assert r["knobs"]["policy"] == r["policy"] and r["knob_changes"] == []   # what it ran with
        # efficiency is the busiest stage's busy share; bubble is each stage's idle share
        assert r["pipeline_efficiency"] == pytest.approx(1 - min(r["bubble_fraction"]), abs=1e-9)
        assert r["makespan_s"] > 0 and r["fallbacks"] >= 0
        # 90% of every prompt is primed: far fewer tokens computed than prompted
        assert 0 < r["computed_tokens_per_s"] < 0.5 * r["input_tokens_per_s"]
        assert 0 < r["good_hit_rate"] <= 1
        assert r["prefill_latency_p50_s"] <= r["prefill_latency_p95_s"]
        assert r["admission_interval_p50_s"] <= r["admission_interval_p99_s"]

    events = json.loads(trace.read_text())["traceEvents"]
    for pid in (1, 2):                                  # one process per run
        execs = [e for e in events if e["ph"] == "X" and e["pid"] == pid and e["name"].endswith("execute")]
        lanes = {e["tid"]: e["args"]["name"] for e in events
                 if e["ph"] == "M" and e["pid"] == pid and e["name"] == "thread_name"}
        # one compute track per stage (send and prepare have their own: tests/telemetry/test_chrome_trace.py)
        assert {lanes[e["tid"]] for e in execs} == {"stage 0 compute", "stage 1 compute"}
        assert all(lanes[e["tid"]] == f"stage {e['args']['stage']} compute" and e["dur"] > 0 for e in execs)


def test_requests_flag_is_exact_when_every_request_fails(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--requests N runs exactly N requests even when all of them fail at arrival (KV pool too small);
    a run in which every request failed exits 1 with one line, its JSON says so, and its figures are
    null (nothing was measured), not 0."""
    fig = tmp_path / "f.json"
    rc = main(["bench", "--model", "llama-3-8b", "--hardware", "h200", "--pp", "2", "--concurrency", "2",
               "--requests", "4", "--prompt-tokens", "1024", "--kv-blocks", "20", "--quiet", "--json", str(fig)])
    err = capsys.readouterr().err.splitlines()
    assert rc == 1
    assert len(err) == 1 and err[0].startswith("wavepp: error: every request failed in wavepp c=2, trtllm-pp c=2")
    for r in json.loads(fig.read_text())["runs"]:
        assert r["failed"] == 4 and r["requests"] == 4 and r["completed"] == 0
        for key in ("input_tokens_per_s", "computed_tokens_per_s", "makespan_s", "pipeline_efficiency",
                    "bubble_fraction", "prefill_latency_p50_s", "prefill_latency_p99_s", "admission_latency_p99_s"):
            assert r[key] is None, key


def test_min_wave_tokens_below_block_size_is_not_a_crash(tmp_path: Path) -> None:
    """A b_min that is not a whole number of blocks is a one-line usage error (exit 2), never a traceback."""
    proc = subprocess.run([str(WAVEPP), "bench", *SMALL, "--workload", "reuse90", "--min-wave-tokens", "16"],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path, env=_env())
    assert "Traceback" not in proc.stderr
    assert proc.returncode == 2 and len(proc.stderr.splitlines()) == 1
    assert "multiple of the block size" in proc.stderr


@pytest.mark.parametrize("argv", [
    ["bench", "--save-run", "/nonexistent-dir/x.json"],
    ["bench", "--json", "/nonexistent-dir/x.json"],
    ["bench", "--trace", "/nonexistent-dir/x.json"],
    ["bench", "--engine", "torch", "--kv-memory-mb", "-5"],
    ["bench", "--time-scale", "0"],
    ["calibrate", "--out", "/nonexistent-dir/p.json"],
    ["calibrate", "--max-wave-tokens", "0", "--out", "p.json"],
    ["knobs", "--store", "redis://127.0.0.1:6379/0", "--history", "-3"],
])
def test_unwritable_outputs_and_bad_numbers_are_refused_before_any_work(
        argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    """A run is never lost at the end for a file it cannot write: the path is checked first."""
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("wavepp: error:")


def test_calibrating_with_a_wave_budget_below_every_chunk_is_a_one_line_error(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["calibrate", "--max-wave-tokens", "8", "--out", str(tmp_path / "p.json")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no calibration wave fits 8 tokens" in err[0]
    assert not (tmp_path / "p.json").exists()


def test_the_default_workload_on_llama_3_8b_completes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """No --prompt-tokens: the default length fits the model's 8192-token context, nothing fails."""
    fig = tmp_path / "f.json"
    assert main(["bench", "--model", "llama-3-8b", "--pp", "2", "--concurrency", "4", "--requests", "24",
                 "--policy", "wavepp", "--quiet", "--json", str(fig)]) == 0
    assert capsys.readouterr().err == ""
    [run] = json.loads(fig.read_text())["runs"]
    assert (run["completed"], run["failed"]) == (24, 0)


@pytest.mark.parametrize("argv,flags", [
    (["--engine", "torch", "--hardware", "h200"], "--hardware: only for --engine sim"),
    (["--engine", "torch", "--realtime", "--host-scale", "2"], "--host-scale, --realtime: only for --engine sim"),
    (["--engine", "torch", "--cost-model", "table"], "--cost-model: only for --engine sim"),
    (["--engine", "torch", "--kv-dtype", "fp8"], "--kv-dtype: only for --engine sim"),
    (["--kv-memory-mb", "64"], "--kv-memory-mb: only for --engine torch"),
    (["--launcher", "spawn"], "--launcher: only for --engine torch"),
])
def test_a_flag_of_the_other_engine_is_refused_not_ignored(argv: list[str], flags: str,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "--quiet", *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"wavepp: error: {flags}"), err


def test_an_fp8_kv_cache_holds_about_twice_the_tokens_of_bf16(tmp_path: Path) -> None:
    """--kv-dtype: the pools are sized from the deployment's memory in blocks of the KV dtype, so fp8
    (one byte an element) fits twice the bf16 tokens less a block's rounding on every stage."""
    pools = {}
    for dtype in ("bf16", "fp8"):
        fig = tmp_path / f"{dtype}.json"
        assert main(["bench", "--model", "minimax-m2.7", "--hardware", "b300", "--pp", "4", "--requests", "8",
                     "--concurrency", "4", "--policy", "wavepp", "--kv-dtype", dtype, "--quiet",
                     "--json", str(fig)]) == 0
        [run] = json.loads(fig.read_text())["runs"]
        pools[dtype] = run["capacity_tokens"]
    assert all(abs(f - 2 * b) <= 2 * 64 for b, f in zip(pools["bf16"], pools["fp8"], strict=True)), pools


def test_a_torch_run_reports_its_device_not_a_hardware_profile(tmp_path: Path) -> None:
    out = tmp_path / "runs.json"
    assert main(["bench", "--engine", "torch", "--pp", "2", "--concurrency", "2", "--requests", "4",
                 "--policy", "wavepp", "--quiet", "--json", str(out)]) == 0
    [run] = json.loads(out.read_text())["runs"]
    assert run["hardware"] == "cpu" and run["engine"] == "torch"


HEAVY = ("torch", "fastapi", "uvicorn", "streamlit", "redis", "pandas", "numpy", "opentelemetry", "httpx", "rich")


def _modules_loaded_by(code: str) -> set[str]:
    """The heavy top-level packages a fresh interpreter has loaded after ``code``."""
    probe = f"import sys\n{code}\nprint(' '.join(sorted({{m.split('.')[0] for m in sys.modules}} & set({HEAVY!r}))))"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, env=_env())
    assert done.returncode == 0, done.stderr
    return set(done.stdout.split())


def test_the_parser_loads_no_heavy_package() -> None:
    """``wavepp --help`` and a bad flag answer at once: the subcommands import their engines, the
    server and the dashboard inside their handlers, never at parse time."""
    assert _modules_loaded_by("from wavepp.runtime.cli import main\n"
                              "assert main(['bench', '--pp', '0']) == 2\n"
                              "assert main(['serve', '--port', 'x']) == 2") == set()


def test_a_bad_policy_or_workload_is_refused_before_torch_loads() -> None:
    """The sim's cost models import torch (about a second): bench checks its cheap flags first."""
    assert "torch" not in _modules_loaded_by("from wavepp.runtime.cli import main\n"
                                             "assert main(['bench', '--policy', 'foo']) == 2\n"
                                             "assert main(['bench', '--workload', 'bogus']) == 2")


def test_a_sim_bench_never_loads_torch(tmp_path: Path) -> None:
    """The simulator needs no torch: importing it cost each bench and each grid worker seconds (the fitted
    cost model's module imported it at its top for the calibration alone)."""
    out = tmp_path / "run.json"
    assert "torch" not in _modules_loaded_by(
        "from wavepp.runtime.cli import main\n"
        f"assert main(['bench', '--engine', 'sim', '--model', 'llama-3-8b', '--hardware', 'h200', '--pp', '2', "
        f"'--concurrency', '2', '--requests', '4', '--quiet', '--json', {str(out)!r}]) == 0")


def test_a_bad_knob_flag_is_refused_before_torch_loads(tmp_path: Path) -> None:
    """A knob that is wrong on its own (not whole blocks, out of range, not a number) is said before
    an engine or a run file loads, as fast as argparse's own errors."""
    runfile = tmp_path / "none.json"
    assert "torch" not in _modules_loaded_by(
        "from wavepp.runtime.cli import main\n"
        "assert main(['bench', '--max-wave-tokens', '8200']) == 2\n"
        "assert main(['bench', '--min-wave-tokens', '100']) == 2\n"
        f"assert main(['preview', {str(runfile)!r}, '--set', 'ring=abc']) == 2\n"
        f"assert main(['preview', {str(runfile)!r}, '--set', 'max_wave_tokens=-5']) == 2")


def test_calibrate_coordination_says_which_figures_it_did_not_measure(capsys: pytest.CaptureFixture[str]) -> None:
    """A factor is not printed as microseconds and a cited constant is not passed off as measured."""
    assert main(["calibrate-coordination", "--prompt-tokens", "4096", "--block-size", "64"]) == 0
    lines = {line.split()[0]: line for line in capsys.readouterr().out.splitlines()}
    assert lines["host_work_scale"].split()[1] == "1.000" and "a factor" in lines["host_work_scale"]
    assert "cited" in lines["stage_message_s"] and "recorded" in lines["redis_rtt_s"]
    assert lines["per_block_complete_s"].endswith(" us")                     # measured: no remark


def test_every_flag_has_help_and_shows_its_default() -> None:
    """`--help` of every command: no flag without a help text, and every flag with a default says it."""
    import argparse

    from wavepp.runtime.cli import _build

    parser, _ = _build()
    bare, silent = [], []

    def walk(p: argparse.ArgumentParser, name: str) -> None:
        for a in p._actions:
            if isinstance(a, argparse._SubParsersAction):
                for sub, sp in a.choices.items():
                    walk(sp, f"{name} {sub}")
            elif a.option_strings and not isinstance(a, argparse._HelpAction):
                if not a.help:
                    bare.append(f"{name} {a.option_strings[0]}")
                elif a.default not in (None, False, [], argparse.SUPPRESS) and "default" not in a.help:
                    silent.append(f"{name} {a.option_strings[0]}")
    walk(parser, "wavepp")
    assert bare == [] and silent == []
    assert parser.parse_args(["grid"]).grid == "paper"
    text = next(a for a in parser._subparsers._group_actions[0].choices["grid"]._actions  # type: ignore[union-attr]
                if a.dest == "grid").help
    assert "paper (default)" in text and "40 settings" in text
    from wavepp.runtime.sources.workloads import FORMS
    bench = parser._subparsers._group_actions[0].choices["bench"]  # type: ignore[union-attr]
    assert FORMS in " ".join(next(a for a in bench._actions if a.dest == "workload").help.split())


def test_the_telemetry_summary_says_recorded_and_the_json_names_the_cost_model(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Spans are recorded in every mode and exported in none with `off` (the line said 685 spans
    'exported' for off); the JSON says the sim's cost model as the `sim cost model:` line does, which
    --quiet keeps (it hides the progress bar only)."""
    out = tmp_path / "b.json"
    assert main(["bench", "--model", "llama-3-8b", "--hardware", "h200", "--pp", "2", "--concurrency", "2",
                 "--requests", "4", "--prompt-tokens", "1024", "--policy", "wavepp", "--telemetry", "off,on",
                 "--quiet", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    line = next(ln for ln in text.splitlines() if ln.strip().startswith("wavepp c=2: off"))
    assert "spans recorded, none exported" in line and "exported /" not in text, line
    assert "sim cost model: analytic" in text
    runs = json.loads(out.read_text())["runs"]
    assert len(runs) == 2 and all(r["sim_cost_model"].startswith("analytic (no kernel tables for model 'llama-3-8b'")
                                  for r in runs), runs


def test_an_output_through_a_link_or_to_a_device_is_written_there_not_replaced(tmp_path: Path) -> None:
    """Outputs are written beside their path and moved into place - except a link (the file it names is
    written; the link stays) and a device (written directly: moving a file onto /dev/full once replaced
    the device node)."""
    real = tmp_path / "real.json"
    real.write_text("{}")
    link = tmp_path / "link.json"
    link.symlink_to(real)
    write_text(link, '{"a": 1}')
    assert link.is_symlink() and json.loads(real.read_text()) == {"a": 1}
    with pytest.raises(RunFailed, match="No space left on device"):
        write_text("/dev/full", "x")
    assert stat.S_ISCHR(os.stat("/dev/full").st_mode)


def test_the_dashboard_server_starts_with_start_up_frozen_and_young_objects_collected_every_10000_allocations(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Its heap grows with the span window, so a full collection walks more every time: what start-up made is
    frozen and the young threshold (after which, ten times over, a full one comes) raised before the server
    starts; the older thresholds kept."""
    import gc

    from streamlit.web import bootstrap

    from wavepp.runtime.process_gc import LONG_RUNNING_GEN0
    seen: list[tuple[tuple[int, ...], int]] = []
    monkeypatch.setattr(bootstrap, "run", lambda *a, **k: seen.append((gc.get_threshold(), gc.get_freeze_count())))
    monkeypatch.setattr(bootstrap, "load_config_options", lambda **k: None)
    saved = gc.get_threshold()
    run = next((Path(__file__).parent / "data" / "runs").glob("*.json*"))
    try:
        gc.set_threshold(700, 10, 10)
        assert main(["dashboard", "--run", str(run), "--port", "1"]) == 0   # not served: run is stubbed
    finally:
        gc.set_threshold(*saved)
        gc.unfreeze()
    [(threshold, frozen)] = seen
    assert threshold == (LONG_RUNNING_GEN0, 10, 10) and frozen > 10_000
