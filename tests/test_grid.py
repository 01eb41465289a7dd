"""``wavepp grid``: every policy on every setting, the subject's ratio to the best baseline, and
the idle causes of whichever lost."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from wavepp.runtime.bench.grid import GridRow, GridSpec, run_grid, summary, to_markdown
from wavepp.runtime.cli import main

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
    table, detail = md.split("## Reuse under pressure")
    assert table.count("\n| llama-3-8b |") == 2 and "wavepp / best" in table
    assert detail.count("\n| llama-3-8b |") == 2 * len(SPEC.policies)      # a row per setting and policy


def test_grid_command_writes_json_and_markdown(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out, md = tmp_path / "grid.json", tmp_path / "grid.md"
    assert main(["grid", "--models", "llama-3-8b", "--hardware", "h200", "--pp", "2", "--workloads", "reuse90",
                 "--concurrency", "4", "--policy", "wavepp,trtllm-pp", "--requests", "8", "--quiet",
                 "--json", str(out), "--markdown", str(md)]) == 0
    data = json.loads(out.read_text())
    assert data["summary"].startswith("wins ") and len(data["settings"]) == 1
    assert set(data["settings"][0]["runs"]) == {"wavepp", "trtllm-pp"}
    assert md.read_text().startswith("# wavepp grid (paper): h200, PP2")


@pytest.mark.parametrize("flag,value,message", [("--policy", "wavepp,best", "unknown policy 'best'"),
                                                ("--workloads", "huge", "unknown workload 'huge'"),
                                                ("--models", "gpt-9", "gpt-9")])
def test_a_bad_grid_value_is_one_line_before_any_run(flag: str, value: str, message: str,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["grid", "--quiet", flag, value]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("wavepp: error:") and message in err[0], err


@pytest.mark.parametrize("grid", ["pressure", "kimi-k3"])
def test_every_grid_takes_the_policy_list(grid: str, capsys: pytest.CaptureFixture[str]) -> None:
    """--policy reaches the pressure and kimi-k3 grids too (it was silently ignored there): a bad name in it is
    the one-line error before any run, as on the paper grid."""
    assert main(["grid", "--grid", grid, "--quiet", "--policy", "wavepp,best"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "unknown policy 'best'" in err[0], err


def test_the_pressure_grid_sizes_its_working_sets_on_the_smallest_pool(tmp_path: Path) -> None:
    """docs: N documents of mean m make 0.5x and 3x the smallest stage's pool; a trace's pools hold a
    third of its distinct blocks; a model whose context cannot hold a mean skips it."""
    from wavepp.runtime.bench.grid_pressure import TRACE_FIT, pressure_settings
    from wavepp.runtime.engines.config import SimConfig
    from wavepp.runtime.engines.sim.engine import SimEngine
    from wavepp.runtime.sources.workloads import parse_workload
    trace = tmp_path / "t.jsonl"
    trace.write_text("\n".join(json.dumps({"timestamp": i, "input_length": 1024, "hash_ids": [0, i + 1]})
                               for i in range(30)))
    settings = pressure_settings("h200", 2, models=("llama-3-8b",), traces=[trace])
    pool = min(SimEngine(SimConfig("llama-3-8b", "h200", 2)).capacities) * 64
    docs = [s for s in settings if s.workload.startswith("docs:")]
    assert docs == []                                    # llama-3-8b's 8K context holds no 32K document
    [t] = [s for s in settings if s.workload.startswith("trace:")]
    assert t.kv_blocks == (round(31 * 512 / TRACE_FIT / 64),) * 2 and t.requests is None
    glm = pressure_settings("b300", 4, models=("glm-5.2",))
    small = min(SimEngine(SimConfig("glm-5.2", "b300", 4)).capacities) * 64
    for s in glm:
        spec = parse_workload(s.workload)
        mean = int(s.label.split()[1].removesuffix("K")) * 1024
        ws = float(s.label.split()[3].removesuffix("x"))
        assert abs(spec.documents * mean - ws * small) <= mean            # the working set, to a document
        assert s.requests == min(2000, max(4 * s.concurrency, 2 * spec.documents))
        assert s.prompt_tokens == mean                                    # the documents' mean length
    assert {s.label for s in glm} >= {"docs 256K ws 3x", "docs 32K ws 0.5x"} and pool > 0


def test_the_kimi_grid_is_28_settings_of_seven_policies_16_at_c_8_or_more() -> None:
    from wavepp.runtime.bench.grid_kimi import POLICIES, kimi_spec
    from wavepp.runtime.engines.config import SimConfig
    from wavepp.runtime.engines.sim.engine import SimEngine
    from wavepp.runtime.policies import get_policy
    from wavepp.runtime.sources.workloads import parse_workload
    spec = kimi_spec()
    settings = spec.settings()
    assert len(settings) == 28 and sum(s.concurrency >= 8 for s in settings) == 16
    assert {s.model for s in settings} == {"kimi-k3"} and spec.policies == POLICIES
    assert {get_policy(p).topology.name for p in spec.policies} == {"pp", "tep", "tep-nccl"}
    [docs] = {s.workload for s in settings if s.workload.startswith("docs:")}
    pool = min(SimEngine(SimConfig("kimi-k3", "b300", 4)).capacities) * 64
    assert abs(parse_workload(docs).documents * 131072 - 0.5 * pool) <= 131072   # half the smallest pool
    assert all(s.requests == max(32, 4 * s.concurrency) for s in settings)
    rows = [GridRow("kimi-k3", "cold", c, subject="wavepp", best_baseline="vllm-pp", ratio=r)
            for c, r in ((1, 0.9), (8, 1.1), (16, 0.95))]
    assert summary(rows).startswith("wins 1/3, min ratio 0.900 (kimi-k3 cold c=1); at c >= 8: wins 1/2")
