"""``wavepp grid``: every policy on every setting, the subject's ratio to the best baseline, and
the idle causes of whichever lost."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from wavepp.runtime.cli import main
from wavepp.runtime.grid import GridSpec, run_grid, summary, to_markdown

SPEC = GridSpec(models=("llama-3-8b",), hardware="h200", pp=2, workloads=("reuse90", "suffix:256"),
                concurrencies=(4,), policies=("wavepp", "trtllm-pp", "trtllm-pp-legacy"), requests=12)


def test_rows_compare_the_subject_with_the_best_baseline() -> None:
    rows = run_grid(SPEC)
    assert [(r.model, r.workload, r.concurrency) for r in rows] == [("llama-3-8b", "reuse90", 4),
                                                                      ("llama-3-8b", "suffix:256", 4)]
    for r in rows:
        rate = {p: f["input_tokens_per_s"] for p, f in r.runs.items()}
        assert set(rate) == set(SPEC.policies) and all(f["completed"] == 12 for f in r.runs.values())
        assert r.best_baseline == max(("trtllm-pp", "trtllm-pp-legacy"), key=rate.__getitem__)
        assert r.ratio == pytest.approx(rate["wavepp"] / rate[r.best_baseline])
        loser = "wavepp" if r.ratio < 1 else r.best_baseline
        shares = r.runs[loser]["idle_shares"]
        assert r.loser_causes == sorted(((c, s) for c, s in shares.items() if s > 0), key=lambda x: -x[1])[:2]
    wins = sum(r.ratio >= 1 for r in rows)
    assert summary(rows).startswith(f"wins {wins}/2, min ratio {min(r.ratio for r in rows):.3f}")
    md = to_markdown(rows, SPEC)
    assert md.count("\n| llama-3-8b |") == 2 and "wavepp / best" in md


def test_grid_command_writes_json_and_markdown(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out, md = tmp_path / "grid.json", tmp_path / "grid.md"
    assert main(["grid", "--models", "llama-3-8b", "--hardware", "h200", "--pp", "2", "--workloads", "reuse90",
                 "--concurrency", "4", "--policy", "wavepp,trtllm-pp", "--requests", "8", "--quiet",
                 "--json", str(out), "--markdown", str(md)]) == 0
    data = json.loads(out.read_text())
    assert data["summary"].startswith("wins ") and len(data["settings"]) == 1
    assert set(data["settings"][0]["runs"]) == {"wavepp", "trtllm-pp"}
    assert md.read_text().startswith("# wavepp grid: h200, PP2")


@pytest.mark.parametrize("flag,value,message", [("--policy", "wavepp,best", "unknown policy 'best'"),
                                                ("--workloads", "huge", "unknown workload 'huge'"),
                                                ("--models", "gpt-9", "gpt-9")])
def test_a_bad_grid_value_is_one_line_before_any_run(flag: str, value: str, message: str,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["grid", "--quiet", flag, value]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("wavepp: error:") and message in err[0], err
