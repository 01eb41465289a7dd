"""scripts/bench_replay.py: a replay's wall time a request and peak memory, one process a run; figures compared."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.scripts_loader import ROOT, load_script

bench_replay = load_script("bench_replay.py", "bench_replay")


def _trace(path: Path, rows: int) -> Path:
    with path.open("w") as f:
        for i in range(rows):
            f.write(json.dumps({"timestamp": 100 * i, "input_length": 1024 + 512 * (i % 3), "output_length": 1,
                                "hash_ids": [0, 1, 2 + i % 2, 10 + i][: 2 + i % 3]}) + "\n")
    return path


def test_the_fingerprint_ignores_wall_time_and_ids_and_sees_a_figure() -> None:
    run = {"policy": "wavepp", "requests": 4, "makespan_s": 1.5, "wall_s": 2.0, "knobs": {"ring": 8}}
    base = bench_replay.fingerprint([run])
    assert bench_replay.fingerprint([run | {"wall_s": 9.0, "run_id": "x"}]) == base
    assert bench_replay.fingerprint([run | {"makespan_s": 1.5000001}]) != base
    assert bench_replay.fingerprint([run | {"knobs": {"ring": 4}}]) != base


def test_a_replay_against_itself_reports_each_policy_and_the_same_figures(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = _trace(tmp_path / "t.jsonl", 6)
    rc = bench_replay.main(["--traces", str(trace), "--policies", "wavepp,vllm-pp", "--rounds", "1",
                            "--before", str(ROOT), "--timer-sleeps", "100"])
    out = capsys.readouterr().out
    assert rc == 0, out
    rows = [line.split("|")[1:-1] for line in out.splitlines() if line.startswith("| t.jsonl")]
    assert [(r[1].strip(), r[2].strip(), r[3].strip()) for r in rows] == [
        ("wavepp", "this", "6"), ("wavepp", "before", "6"), ("vllm-pp", "this", "6"), ("vllm-pp", "before", "6")]
    for r in rows:
        wall, per_request, peak = float(r[4]), float(r[5].split()[0]), float(r[6])
        assert wall > 0 and per_request == pytest.approx(1e3 * wall / 6, abs=1.0) and peak > 50
    assert rows[0][7] == rows[1][7] and rows[2][7] == rows[3][7] and rows[0][7] != rows[2][7]
    assert "sim loop timer (this)" in out and "figures differ" not in out
