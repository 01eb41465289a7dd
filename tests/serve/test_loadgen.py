"""`wavepp bench --url` against a running `wavepp serve` (sim engine on the wall clock): the same
prompts as the in-process bench, the same figures computed from the server's spans, the clients'
own latencies, open loop with refusals counted, and trace replay."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from wavepp.runtime.bench.runs import BenchConfig, run_one
from wavepp.runtime.engines.config import SimConfig
from wavepp.runtime.engines.sim.engine import SimEngine
from wavepp.runtime.serve.loadgen import policy_label, wave_policies
from wavepp.runtime.sources.workloads import parse_workload

TRACE = Path(__file__).resolve().parents[1] / "data" / "traces" / "good.jsonl"


def bench_url(url: str, out: Path, *flags: str) -> dict[str, Any]:
    done = subprocess.run([sys.executable, "-m", "wavepp", "bench", "--url", url, "--quiet",
                           "--json", str(out), *flags], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    [run] = json.loads(out.read_text())["runs"]
    return dict(run)


def test_closed_loop_sends_the_in_process_benchs_prompts_and_reports_its_figures(
        start_server: Callable[..., Any], tmp_path: Path) -> None:
    server = start_server("--engine", "sim", "--pp", "2", "--kv-blocks", "3000", "--time-scale", "0.05")
    run = bench_url(server.url, tmp_path / "url.json", "--workload", "reuse90", "--concurrency", "1",
                    "--requests", "24", "--prompt-tokens", "2048")
    assert run["completed"] == 24 and run["failed"] == 0 and run["requests"] == 24
    assert run["input_tokens_per_s"] > 0 and 0 < run["pipeline_efficiency"] <= 1
    assert run["prefill_latency_p50_s"] > 0 and run["workload"] == "reuse90" and run["hardware"] == "http"
    client = run["client"]
    assert client["answered"] == client["sent"] == 24 and client["refused_429"] == 0
    assert client["latency_p50_s"] >= run["prefill_latency_p50_s"] * 0.9
    assert client["http_overhead_p50_s"] >= 0

    # The in-process bench of the same setting, one request at a time: the same prompts in the same
    # order meet the same cache, so the server found exactly the prefixes the in-process run found.
    engine = SimEngine(SimConfig("llama-3-8b", "h200", 2, kv_blocks=[3000]))
    cfg = BenchConfig(parse_workload("reuse90"), [1], ["wavepp"], 24, prompt_tokens=2048)
    record = run_one(engine, cfg, "wavepp", 1)
    assert client["reused_tokens"] == sum(c.reused_tokens for c in record.loop.completions) > 0
    assert client["input_tokens"] == sum(s["a"]["gen_ai.usage.input_tokens"] for s in record.encoded
                                         if s["n"] == "wavepp.request")
    assert server.stop() == 0, server.errors()


def test_open_loop_counts_the_requests_the_server_refused(start_server: Callable[..., Any], tmp_path: Path) -> None:
    server = start_server("--engine", "sim", "--pp", "2", "--kv-blocks", "100", "--max-queue", "2",
                          "--time-scale", "20")
    run = bench_url(server.url, tmp_path / "open.json", "--workload", "cold", "--rate", "200", "--requests", "30",
                    "--prompt-tokens", "2048")
    client = run["client"]
    assert client["sent"] == 30 and client["failed"] == 0
    assert client["refused_429"] > 0 and client["answered"] + client["refused_429"] == 30
    assert run["completed"] == client["answered"]          # the server's spans saw exactly what was answered
    assert server.stop() == 0, server.errors()


def test_trace_replay_over_http(start_server: Callable[..., Any], tmp_path: Path) -> None:
    server = start_server("--engine", "sim", "--pp", "2", "--kv-blocks", "1000", "--time-scale", "0.05")
    run = bench_url(server.url, tmp_path / "trace.json", "--workload", f"trace:{TRACE}", "--trace-speed", "10",
                    "--concurrency", "2")
    rows = len([line for line in TRACE.read_text().splitlines() if line.strip()])
    assert run["completed"] == rows and run["client"]["answered"] == rows
    assert run["good_hit_rate"] is not None          # rows share prefix blocks: the later ones reuse them
    assert server.stop() == 0, server.errors()


def test_bench_url_refuses_engine_flags_and_an_unreachable_server(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "wavepp", "bench", "--url", "http://127.0.0.1:9", "--pp", "3"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert done.stderr == "wavepp: error: --pp: not with --url (the server's own settings apply)\n"
    done = subprocess.run([sys.executable, "-m", "wavepp", "bench", "--url", "http://127.0.0.1:9", "--quiet"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and done.stderr.startswith("wavepp: error: cannot reach http://127.0.0.1:9")
    assert done.stderr.count("\n") == 1


def test_the_policy_label_is_what_the_measured_waves_ran(start_server: Callable[..., Any], tmp_path: Path) -> None:
    server = start_server("--engine", "sim", "--pp", "2", "--kv-blocks", "3000", "--time-scale", "0.05",
                          "--policy", "trtllm-pp")
    put = server.client.put("/v1/knobs", json={"changes": {"policy": "wavepp"}})
    assert put.status_code == 200, put.text
    # The loop holds the new knobs for its next wave; idle, it still says trtllm-pp when the bench starts.
    server.wait_for(lambda s: s["knobs_version"] == put.json()["version"])
    assert server.client.get("/v1/spans", params={"after": 1 << 62}).json()["policy"] == "trtllm-pp"
    out = tmp_path / "url.json"
    done = subprocess.run([sys.executable, "-m", "wavepp", "bench", "--url", server.url, "--json", str(out),
                           "--workload", "reuse90", "--concurrency", "2", "--requests", "12",
                           "--prompt-tokens", "1024"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    [run] = json.loads(out.read_text())["runs"]
    assert run["policy"] == "wavepp" and run["policies"] == ["wavepp"]      # every measured wave ran wavepp
    assert "trtllm-pp" not in done.stdout, done.stdout                      # nor does the table say otherwise
    assert server.stop() == 0, server.errors()


def test_a_policy_that_changed_during_the_run_is_named_in_wave_order() -> None:
    def plan(t0: int, policy: str | None) -> dict[str, Any]:
        attrs = {"wavepp.tokens": 0} if policy is None else {"wavepp.tokens": 64, "wavepp.policy": policy}
        return {"n": "wavepp.wave.plan", "t0": t0, "t1": t0 + 1, "a": attrs}

    spans = [plan(3, "wavepp"), plan(1, "trtllm-pp"), plan(2, None), plan(4, "wavepp"),
             {"n": "wavepp.request", "t0": 0, "t1": 9, "a": {"wavepp.policy": "trtllm-pp-legacy"}},
             plan(5, "trtllm-pp")]
    assert wave_policies(spans) == ["trtllm-pp", "wavepp", "trtllm-pp"]     # a plan with no wave ran nothing
    assert policy_label(["trtllm-pp", "wavepp"], "x") == "trtllm-pp->wavepp"
    assert policy_label([], "wavepp") == "wavepp"                           # no wave measured: the server's


def test_open_loop_without_concurrency_sends_the_requests_asked_once(
        start_server: Callable[..., Any], tmp_path: Path) -> None:
    """``--rate R --requests N``: one open-loop run of N requests, not one per default concurrency."""
    server = start_server("--engine", "sim", "--pp", "2", "--kv-blocks", "1000", "--time-scale", "0.05")
    run = bench_url(server.url, tmp_path / "rate.json", "--workload", "cold", "--rate", "200", "--requests", "12",
                    "--prompt-tokens", "2048")
    assert run["client"]["sent"] == 12 and run["concurrency"] == 0
    assert server.stop() == 0, server.errors()
