"""The autopilot's decisions on made-up windows and a made-up predictor: each rule on its own."""

from __future__ import annotations

from wavepp.runtime.autopilot.pilot import Candidate, Pilot, Search, setting_key
from wavepp.runtime.autopilot.settings import AutopilotSettings
from wavepp.runtime.autopilot.window import WindowFigures, WorkloadStats
from wavepp.runtime.control.knobs import Knobs

ON = AutopilotSettings(mode="on", cooldown=2)
START = Knobs(ring=8)
BIG = Knobs(ring=8, max_wave_tokens=32768)
RING1 = Knobs(ring=1)


def window(i: int, tps: float, prompt: float = 4096.0, reuse: float = 0.9) -> WindowFigures:
    return WindowFigures(i, i * 10**9, (i + 1) * 10**9, tps, 0.9, 0.1, 0.2, 10, 0,
                         WorkloadStats(10, prompt, reuse, 10.0, open_loop=False))


class Model:
    """A predictor that answers from a table of (setting -> input tok/s) and counts its calls."""

    def __init__(self, table: dict[Knobs, float], error: float = 0.01) -> None:
        self.table, self.error, self.calls = table, error, 0

    def __call__(self, w: WindowFigures, knobs: Knobs, settings: AutopilotSettings) -> Search:
        self.calls += 1
        others = [Candidate(k, v) for k, v in self.table.items() if k != knobs]
        return Search(self.table[knobs], self.error, others, len(self.table), len(self.table))


def run(pilot: Pilot, windows: list[WindowFigures], knobs: Knobs, model: Model,
        settings: AutopilotSettings = ON) -> list[str]:
    """Step through ``windows``, following the knobs each decision writes; the actions taken."""
    actions = []
    for w in windows:
        d = pilot.step(w, knobs, settings, False, model)
        actions.append(d.action)
        if d.knobs is not None:
            knobs = d.knobs
    return actions


def test_a_settled_window_is_searched_once_and_a_gain_past_the_error_is_applied() -> None:
    model = Model({START: 100.0, BIG: 130.0})
    pilot = Pilot()
    d0 = pilot.step(window(0, 50), START, ON, False, model)
    d1 = pilot.step(window(1, 100), START, ON, False, model)
    assert (d0.action, d1.action, model.calls) == ("hold", "apply", 1)
    assert d1.knobs == BIG and d1.chosen == {"max_wave_tokens": 32768}
    assert abs(d1.predicted_gain - 0.30) < 1e-9 and d1.error == 0.01
    d2 = pilot.step(window(2, 128), BIG, ON, False, model)
    assert (d2.action, d2.verdict) == ("keep", "kept") and abs(d2.observed_gain - 0.28) < 1e-9
    assert pilot.step(window(3, 129), BIG, ON, False, model).action == "hold"
    assert model.calls == 1                  # the same workload is not searched again


def test_a_gain_within_the_error_plus_margin_is_not_applied() -> None:
    model = Model({START: 100.0, BIG: 102.5}, error=0.01)      # +2.5 % < 1 % error + 2 % margin
    d = [pilot_step for pilot_step in run(Pilot(), [window(0, 90), window(1, 100)], START, model)]
    assert d == ["hold", "keep"]


def test_a_shift_is_waited_out_then_searched_and_applied() -> None:
    model = Model({START: 100.0, BIG: 100.5})
    pilot = Pilot()
    assert run(pilot, [window(0, 90), window(1, 100), window(2, 101)], START, model) == ["hold", "keep", "hold"]
    model.table = {START: 60.0, BIG: 90.0}                     # long documents: a bigger wave now wins
    actions = run(pilot, [window(3, 60, prompt=65536), window(4, 61, prompt=65536)], START, model)
    assert actions == ["hold", "apply"] and model.calls == 2
    assert pilot.step(window(5, 88, prompt=65536), BIG, ON, False, model).verdict == "kept"


def test_a_wrong_model_is_rolled_back_the_next_window_and_its_setting_not_applied_again() -> None:
    """The model says ring 1 wins by 50 %; the run falls by 60 % under it: rolled back in the window
    after the apply, cooled down, searched again - and the same wrong table no longer picks it."""
    model = Model({START: 100.0, RING1: 150.0})
    pilot = Pilot()
    knobs = START
    log = []
    for i, tps in enumerate([90, 100, 40, 100, 100, 100, 100, 100]):
        d = pilot.step(window(i, tps if knobs == START else 40), knobs, ON, False, model)
        log.append(d.action)
        knobs = d.knobs or knobs
    assert log[:3] == ["hold", "apply", "rollback"] and knobs == START
    assert log[3:5] == ["cooldown", "cooldown"] and "apply" not in log[3:]
    assert model.calls == 2                  # searched again after the cooldown, and kept the knobs
    assert pilot.corrections[setting_key(RING1)] < 0.5     # observed / predicted, against the current's


def test_a_setting_outside_the_bounds_is_never_applied() -> None:
    model = Model({START: 100.0, BIG: 200.0, Knobs(ring=16): 120.0})
    bounded = AutopilotSettings(mode="on", bounds={"ring": (4, 16)})        # max_wave_tokens not allowed
    pilot = Pilot()
    actions = run(pilot, [window(0, 90), window(1, 100)], START, model, bounded)
    assert actions == ["hold", "apply"] and pilot.pending is not None
    assert pilot.pending.applied == Knobs(ring=16)
    tight = AutopilotSettings(mode="on", bounds={"ring": (4, 12)})
    assert run(Pilot(), [window(0, 90), window(1, 100)], START, model, tight) == ["hold", "keep"]


def test_advise_decides_but_writes_nothing_and_frozen_or_draining_decide_nothing() -> None:
    model = Model({START: 100.0, BIG: 130.0})
    advise = AutopilotSettings(mode="advise")
    pilot = Pilot()
    pilot.step(window(0, 90), START, advise, False, model)
    d = pilot.step(window(1, 100), START, advise, False, model)
    assert (d.action, d.knobs, d.chosen) == ("advise", None, {"max_wave_tokens": 32768}) and pilot.pending is None
    frozen = ON.frozen_by("an operator wrote knobs version 7")
    for settings, draining, action in ((frozen, False, "frozen"), (ON, True, "drain")):
        pilot, model.calls = Pilot(), 0
        pilot.step(window(0, 90), START, settings, draining, model)
        d = pilot.step(window(1, 100), START, settings, draining, model)
        assert (d.action, d.knobs, model.calls) == (action, None, 0)


def test_the_noise_band_is_the_largest_recent_change_between_steady_windows() -> None:
    pilot = Pilot()
    model = Model({START: 100.0})
    run(pilot, [window(0, 100), window(1, 103), window(2, 100), window(3, 96)], START, model)
    assert abs(pilot.band - 0.04) < 1e-9     # |96 - 100| / 100; fewer than two samples: the default
