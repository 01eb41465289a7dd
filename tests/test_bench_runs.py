"""Which runs a ``wavepp bench`` makes: one per (concurrency, policy) where concurrency is a dimension of
the run (a closed loop, a trace capped by ``--concurrency``), one per policy where it is not (a trace's
own arrivals without a cap), and the runs' JSON and labels never name a concurrency that did not apply."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from wavepp.runtime.cli import main

TRACE = Path(__file__).resolve().parent / "data" / "traces" / "good.jsonl"
SIM = ["--model", "llama-3-8b", "--hardware", "h200", "--pp", "2", "--kv-blocks", "400", "--quiet"]


def test_a_trace_without_concurrency_runs_once_per_policy_with_no_cap(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "runs.json"
    assert main(["bench", *SIM, "--workload", f"trace:{TRACE}", "--policy", "wavepp,trtllm-pp",
                 "--json", str(out)]) == 0
    runs = json.loads(out.read_text())["runs"]
    assert [r["policy"] for r in runs] == ["wavepp", "trtllm-pp"]        # not three runs each
    assert all(r["concurrency"] == 0 and r["completed"] == 4 for r in runs)    # 0: no cap (open loop)
    printed = capsys.readouterr().out
    assert "open loop" in printed and "c=8" not in printed and "c=0" not in printed


def test_a_trace_with_concurrency_runs_once_per_cap(tmp_path: Path) -> None:
    out = tmp_path / "runs.json"
    assert main(["bench", *SIM, "--workload", f"trace:{TRACE}", "--policy", "wavepp", "--concurrency", "1,2",
                 "--json", str(out)]) == 0
    assert [r["concurrency"] for r in json.loads(out.read_text())["runs"]] == [1, 2]


def test_rate_with_concurrency_over_url_is_refused_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    """An open loop's arrivals come at the rate: a concurrency would do nothing (no server needed to say so)."""
    assert main(["bench", "--url", "http://127.0.0.1:9", "--rate", "20", "--concurrency", "8"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("wavepp: error: --concurrency") and "--rate" in err[0], err
