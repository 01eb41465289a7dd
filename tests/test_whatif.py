"""The what-if replay: a change that must help does, the same knobs predict what the run did,
predictions are deterministic, and a preview that cannot run says why."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from wavepp.runtime.bench.runs import BenchConfig, RunRecord, run_one
from wavepp.runtime.cli import main
from wavepp.runtime.control.knobs import Knobs
from wavepp.runtime.engines.calibrate import FORMAT
from wavepp.runtime.engines.config import SimConfig
from wavepp.runtime.engines.coordination import DEFAULT_COSTS
from wavepp.runtime.engines.sim.engine import SimEngine
from wavepp.runtime.runs.runfile import save_runs
from wavepp.runtime.sources.workloads import parse_workload
from wavepp.runtime.whatif import preview as W
from wavepp.runtime.whatif import suggest as S
from wavepp.runtime.whatif.report import spread_line

KNOBS = Knobs(max_wave_tokens=8192, min_wave_tokens=4096)


def sim_run(knobs: Knobs, workload: str = "reuse90", requests: int = 96) -> RunRecord:
    engine = SimEngine(SimConfig("llama-3-8b", "h200", 4, kv_blocks=[3000]))
    cfg = BenchConfig(parse_workload(workload), [16], [knobs.policy], requests, prompt_tokens=4096, knobs=knobs)
    return run_one(engine, cfg, knobs.policy, 16)


@pytest.fixture(scope="module")
def ring1() -> RunRecord:
    """One wave in flight on four stages: three of them idle at any time."""
    return sim_run(KNOBS.replace(ring=1))


def replay(record: RunRecord) -> W.Replay:
    return W.replay_of(record.encoded, record.meta, None)


def test_a_change_that_must_help_does(ring1: RunRecord) -> None:
    current = W.knobs_at_end(ring1.meta, [])
    assert current.ring == 1
    result = W.preview(replay(ring1), W.sim_spec(ring1.meta), current, current.replace(ring=8))
    now, then = result.current.figures, result.proposed.figures
    assert result.changes == {"ring": 8}
    assert then.input_tokens_per_s > 1.5 * now.input_tokens_per_s
    assert then.pipeline_efficiency > now.pipeline_efficiency + 0.15
    assert W.idle_shares(now)["ring_full"] > 0.1 > 0.02 > W.idle_shares(then).get("ring_full", 0.0)  # stage 0 of 4
    assert spread_line(result) == ""                                     # one deterministic replay each


def test_the_same_knobs_predict_what_the_run_did(ring1: RunRecord) -> None:
    """Arrivals, lengths and reusable prefixes are all the replay keeps; for the run's own knobs they
    are enough to predict its throughput and efficiency."""
    observed = W.observed_over(ring1.encoded, replay(ring1), 4)     # the run without its fill and drain
    current = W.knobs_at_end(ring1.meta, [])
    pred = W.preview(replay(ring1), W.sim_spec(ring1.meta), current, current).proposed.figures
    assert pred.completed == observed.completed
    assert 96 // 2 < observed.completed < 96 - 12      # without a margin of 12 (an eighth) at each end
    assert pred.input_tokens_per_s == pytest.approx(observed.input_tokens_per_s, rel=0.02)
    assert pred.pipeline_efficiency == pytest.approx(observed.pipeline_efficiency, abs=0.02)
    assert pred.good_hit_rate == pytest.approx(observed.good_hit_rate, abs=0.02)


def test_predictions_are_deterministic(ring1: RunRecord) -> None:
    current = W.knobs_at_end(ring1.meta, [])
    runs = [W.preview(replay(ring1), W.sim_spec(ring1.meta), current, current.replace(ring=4)) for _ in range(2)]
    assert runs[0].proposed.figures.as_dict() == runs[1].proposed.figures.as_dict()
    assert runs[0].current.figures.as_dict() == runs[1].current.figures.as_dict()


def test_too_few_arrivals_says_so(ring1: RunRecord) -> None:
    few = W.Replay(replay(ring1).arrivals[:5], 16, False, "the 5 requests of the last 1 s")
    with pytest.raises(W.WhatIfError, match=r"too few arrivals to replay: the 5 requests of the last 1 s; "
                                            r"a preview needs at least 16"):
        W.preview(few, W.sim_spec(ring1.meta), KNOBS, KNOBS.replace(ring=8))


def test_a_replay_past_its_time_limit_stops(ring1: RunRecord) -> None:
    with pytest.raises(W.TimeLimit, match="time limit of 1e-09 s"):
        W.preview(replay(ring1), W.sim_spec(ring1.meta), KNOBS, KNOBS.replace(ring=8), time_limit_s=1e-9)


def test_rebuilt_prompts_share_what_was_reusable() -> None:
    arrivals = [W.Arrival(0.0, 640, 512, 1.0), W.Arrival(0.1, 700, 512, 1.2),      # one document, primed
                W.Arrival(2.0, 900, 640, 3.0),                   # 10 blocks: the latest finished prompt of 10
                W.Arrival(2.5, 300, 0, 3.1)]                                       # cold
    trace = W.rebuild_trace(arrivals, 64, open_loop=False)
    a, b, c, d = (r.hash_ids for r in trace.rows)
    assert trace.primed == (a[:8],) and a[:8] == b[:8] and a[8] != b[8]
    assert c[:10] == b[:10] and c[10] not in a + b
    assert not set(d) & set(a + b + c)
    assert [r.arrival_s for r in trace.rows] == [0.0] * 4                # a closed loop: paced by its cap alone
    assert [r.arrival_s for r in W.rebuild_trace(arrivals, 64, open_loop=True).rows] == [0.0, 0.1, 2.0, 2.5]


def profile(pp: int = 4) -> dict:
    coef = {"c": 2e-3, "c_chunk": 1e-4, "gamma": 1e-7, "beta": 2e-5, "alpha_lx": 1e-9, "alpha_xx": 2e-9}
    return {"format": FORMAT, "engine": "torch", "model": "tiny-llama", "pp": pp, "block_size": 64,
            "vocab_size": 32000, "max_context": 8192, "capacities": [3000] * pp, "threads": 1,
            "stages": [coef] * pp, "samples": [[]] * pp, "coordination": DEFAULT_COSTS.as_dict()}


def test_a_torch_run_needs_a_calibration(ring1: RunRecord, tmp_path: Path) -> None:
    meta = {**ring1.meta, "engine": "torch", "model": "tiny-llama", "hardware": "cpu"}
    meta.pop("sim")
    with pytest.raises(W.WhatIfError, match=r"no calibration: .*`wavepp calibrate --engine torch --model "
                                            r"tiny-llama --pp 4 --out FILE`"):
        W.sim_spec(meta)
    path = tmp_path / "profile.json"
    path.write_text(json.dumps(profile()))
    spec = W.sim_spec(meta, str(path))
    assert spec.cost_profile == str(path) and spec.capacities == (3000,) * 4
    result = W.preview(replay(ring1), spec, KNOBS.replace(ring=1), KNOBS.replace(ring=8))
    assert result.proposed.figures.input_tokens_per_s > result.current.figures.input_tokens_per_s
    path.write_text(json.dumps(profile(2)))
    with pytest.raises(W.WhatIfError, match="measured with pp=2; the run has 4"):
        W.sim_spec(meta, str(path))


def test_suggest_within_bounds_replays_no_setting_outside_them(ring1: RunRecord) -> None:
    """The autopilot's bounds (ring only, here) narrow the search: nothing it could not apply is replayed."""
    current = W.knobs_at_end(ring1.meta, [])

    def ring_only(k: Knobs) -> bool:
        return (k.max_wave_tokens, k.min_wave_tokens) == (current.max_wave_tokens, current.min_wave_tokens)
    grid = S.suggest_grid(current, 4, 64)
    s = S.suggest(replay(ring1), W.sim_spec(ring1.meta), current, S.Goal("throughput"), within=ring_only)
    assert s.complete and s.planned == 1 + sum(map(ring_only, grid[1:])) == 4 < len(grid)
    assert all(ring_only(Knobs(**p.knobs)) for p in s.tried) and s.changes.get("ring", 1) > 1


def test_suggest_finds_the_better_ring_and_never_applies(ring1: RunRecord) -> None:
    current = W.knobs_at_end(ring1.meta, [])
    s = S.suggest(replay(ring1), W.sim_spec(ring1.meta), current, S.Goal("throughput"))
    assert s.complete and s.planned == len(S.suggest_grid(current, 4, 64)) == 19
    assert s.changes.get("ring", 1) > 1
    best = s.best.figures.input_tokens_per_s
    assert best > 1.5 * s.current.figures.input_tokens_per_s
    assert best == pytest.approx(max(p.figures.input_tokens_per_s for p in s.tried), rel=1e-6)   # anchored
    latency = S.suggest(replay(ring1), W.sim_spec(ring1.meta), current, S.Goal("latency", floor=1e12))
    assert latency.changes == {}                  # no setting reaches the floor: keep the current one


def test_observed_since_counts_only_the_requests_after_the_change(ring1: RunRecord) -> None:
    reqs = sorted(s["t0"] for s in ring1.encoded if s["n"] == "wavepp.request")
    figures = W.observed_since(ring1.encoded, reqs[48], 4)
    assert figures.completed == 48


def test_cli_preview_and_suggest(ring1: RunRecord, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "run.json"
    save_runs(path, [ring1.saved()])
    out = tmp_path / "p.json"
    assert main(["preview", str(path), "--set", "ring=8", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "preview: ring=8; replayed all 96 requests" in text and "input tok/s" in text
    assert "the run itself over the same arrivals: " in text and "(the replay of the current knobs: " in text
    data = json.loads(out.read_text())
    assert data["proposed"]["knobs"]["ring"] == 8 and data["throughput_gain"] > 0.5
    assert main(["suggest", str(path), "--time-limit", "120"]) == 0
    assert "goal highest input throughput: set " in capsys.readouterr().out


@pytest.mark.parametrize("argv, message", [
    (["--set", "ring=eight"], "ring: expected an integer"),
    (["--set", "min_wave_tokens=65536"], "b_min 65536 > M 8192"),
    (["--set", "max_wave_tokens=8200"], "not a multiple of the block size 64"),
    ([], "give the proposed knobs with --set"),
    (["--set", "ring=8", "--window", "0.001"], "too few arrivals"),
    (["--set", "ring=8", "--run-id", "nope"], "no run 'nope'"),
])
def test_cli_bad_input_is_one_line_exit_2(ring1: RunRecord, tmp_path: Path, argv: list[str], message: str,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "run.json"
    save_runs(path, [ring1.saved()])
    assert main(["preview", str(path), *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1, err


def test_cli_torch_run_without_calibration_and_missing_file(ring1: RunRecord, tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    saved = ring1.saved()
    saved.meta = {**saved.meta, "engine": "torch", "model": "tiny-llama"}
    path = tmp_path / "torch.json"
    save_runs(path, [saved])
    assert main(["suggest", str(path)]) == 2
    assert "no calibration" in capsys.readouterr().err
    assert main(["preview", str(tmp_path / "none.json"), "--set", "ring=8"]) == 2
    assert "no such run file" in capsys.readouterr().err


def test_a_window_counts_only_the_busy_time_inside_it() -> None:
    """A step still executing when the window's last request completes (the next request's chunk)
    counts for its part inside the window: efficiency stays in [0, 1], no bubble is negative
    (a preview printed efficiency 1.027 and a bubble fraction of -0.027)."""
    s = 1_000_000_000

    def span(name: str, t0: float, t1: float, **a: int) -> W.Span:
        return {"n": name, "t0": int(t0 * s), "t1": int(t1 * s), "a": a}

    spans = [span("wavepp.request", 0, 10), span("wavepp.request", 5, 20),
             span("wavepp.stage.execute", 0, 9, **{"wavepp.stage": 0}),
             span("wavepp.stage.execute", 9, 20, **{"wavepp.stage": 0}),     # the second request's chunk
             span("wavepp.stage.execute", 2, 8, **{"wavepp.stage": 1})]
    figures = W.observed_since(spans, 0, 2, until_ns=4 * s)         # the first request only: [0 s, 10 s]
    assert figures.makespan_s == pytest.approx(10.0)
    assert figures.pipeline_efficiency == pytest.approx(1.0)       # stage 0 busy 9 s + 1 s of the next chunk
    assert figures.bubble_fraction == pytest.approx([0.0, 0.4])


def test_cli_suggest_stopped_by_its_time_limit_fails(ring1: RunRecord, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """The best of the settings tried is shown, and the command fails (exit 1, docs/dashboard.md):
    a search cut short is not a finished one."""
    path = tmp_path / "run.json"
    save_runs(path, [ring1.saved()])
    calls = []
    real = S.predict

    def predict_then_time_out(*args: object, **kwargs: object) -> W.Prediction:
        calls.append(1)
        if len(calls) > 3:                        # the current knobs and two settings finish in time
            raise W.TimeLimit("the replay ran past its time limit of 1 s")
        return real(*args, **kwargs)              # type: ignore[arg-type]

    monkeypatch.setattr(S, "predict", predict_then_time_out)
    # A limit no real replay reaches on a loaded machine: only the fake one above stops the search.
    assert main(["suggest", str(path), "--time-limit", "600"]) == 1
    captured = capsys.readouterr()
    assert "partial search - 3 of 19 settings tried before the time limit" in captured.out
    assert "nothing is proposed" in captured.out and "input tok/s" in captured.out and "best so far" in captured.out
    assert captured.err.count("\n") == 1 and "after 3 of 19 settings" in captured.err, captured.err
