"""The replay's own error beside every prediction: a change within it is labelled within noise and
never proposed; a search the time limit cut is partial, proposes nothing and can be continued."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from tests.test_whatif import KNOBS, sim_run
from wavepp.runtime.bench.runs import RunRecord
from wavepp.runtime.cli import main
from wavepp.runtime.runs.runfile import save_runs
from wavepp.runtime.whatif import preview as W
from wavepp.runtime.whatif import suggest as S
from wavepp.runtime.whatif.report import WITHIN_NOISE, compare_rows, suggestion_line


@pytest.fixture(scope="module")
def run() -> RunRecord:
    return sim_run(KNOBS.replace(ring=2))


def test_the_error_has_a_floor_and_says_what_is_within_it() -> None:
    exact = W.ReplayError(0.0)
    assert exact.noise == W.MIN_NOISE and exact.within(1.8e-10) and not exact.within(0.05)
    assert W.ReplayError(-0.3, 0.1).noise == 0.3 and W.ReplayError(None, 0.12).noise == 0.12
    assert "replay error ±30.0%" in W.ReplayError(-0.3).describe()


def test_a_change_within_the_error_is_labelled_within_noise(run: RunRecord) -> None:
    f = run.figures
    tiny = dataclasses.replace(f, input_tokens_per_s=f.input_tokens_per_s * (1 + 1.8e-10))
    rows = {r[0]: r[3] for r in compare_rows(f, tiny, W.ReplayError(0.0))}
    assert rows["input tok/s"] == f"+0.0% ({WITHIN_NOISE})"
    big = dataclasses.replace(f, input_tokens_per_s=f.input_tokens_per_s * 1.2)
    assert {r[0]: r[3] for r in compare_rows(f, big, W.ReplayError(0.0))}["input tok/s"] == "+20.0%"


class FakeGrid:
    """``S.predict`` for a search without its replays: the current knobs replayed once for real, every
    other setting predicted at ``factor`` x its throughput; past ``stop_after`` calls the time limit."""

    def __init__(self, factor: float, stop_after: int | None = None) -> None:
        self.real, self.factor, self.stop_after = S.predict, factor, stop_after
        self.calls = 0
        self.base: W.Prediction | None = None

    def __call__(self, replay: W.Replay, spec: W.SimSpec, knobs: W.Knobs, deadline: W.Deadline,
                 label: str) -> W.Prediction:
        self.calls += 1
        if self.stop_after is not None and self.calls > self.stop_after:
            raise W.TimeLimit("the replay ran past its time limit")
        if self.base is None:
            self.base = self.real(replay, spec, knobs, deadline, label)
            return self.base
        f = self.base.figures
        return dataclasses.replace(self.base, knobs=knobs.as_dict(), figures=dataclasses.replace(
            f, input_tokens_per_s=(f.input_tokens_per_s or 0.0) * self.factor))


def fake_grid(monkeypatch: pytest.MonkeyPatch, factor: float, stop_after: int | None = None) -> FakeGrid:
    fake = FakeGrid(factor, stop_after)
    monkeypatch.setattr(S, "predict", fake)
    return fake


def test_cli_suggest_refuses_a_within_noise_change(run: RunRecord, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """A gain of 1.8e-10 is no reason to change three knobs: the current knobs stay."""
    path, out = tmp_path / "run.json", tmp_path / "s.json"
    save_runs(path, [run.saved()])
    fake_grid(monkeypatch, 1 + 1.8e-10)
    assert main(["suggest", str(path), "--time-limit", "600", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "keep the current knobs - no setting of the 19 of 19 settings tried beats them" in text, text
    assert "18 within noise" in text and "replay error ±1.0%" in text
    data = json.loads(out.read_text())
    assert data["changes"] == {} and data["complete"] and data["within_noise"] == 18
    assert data["replay_error"]["noise"] == W.MIN_NOISE


def test_suggest_proposes_a_gain_beyond_the_error(run: RunRecord, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_grid(monkeypatch, 1.2)
    current = W.knobs_at_end(run.meta, [])
    s = S.suggest(W.replay_of(run.encoded, run.meta, None), W.sim_spec(run.meta), current, S.Goal())
    assert s.changes and s.complete and s.within_noise == 0
    assert suggestion_line(s).startswith(f"goal highest input throughput: set {next(iter(s.changes))}=")


def test_a_partial_search_proposes_nothing_and_continues(run: RunRecord, monkeypatch: pytest.MonkeyPatch) -> None:
    replay, spec, current = W.replay_of(run.encoded, run.meta, None), W.sim_spec(run.meta), W.knobs_at_end(run.meta, [])
    fake = fake_grid(monkeypatch, 1.2, stop_after=4)
    partial = S.suggest(replay, spec, current, S.Goal())
    line = suggestion_line(partial)
    assert not partial.complete and len(partial.tried) == 4
    assert line.startswith("goal highest input throughput: partial search - 4 of 19 settings tried before the "
                           "time limit; nothing is proposed"), line
    fake.calls, fake.stop_after = 0, None
    done = S.suggest(replay, spec, current, S.Goal(), resume=partial)
    assert done.complete and len(done.tried) == 19 and fake.calls == 15       # only the settings not tried
    assert done.tried[:4] == partial.tried and done.changes
