"""What-if: replay a run's recent arrivals in the simulator under two knob sets (preview; a small
grid of them: :mod:`runtime.whatif.suggest`), before a knob change is applied.

The replay runs the SAME loop (:class:`runtime.loop.PipelineLoop`, through
:func:`runtime.bench.runs.run_one`) on the sim engine in virtual time, with the cost model of the
engine that ran: the sim's own (model, hardware, tables or roofline), or for the torch engine a
``wavepp calibrate`` profile. Without one, a torch run cannot be previewed, and says so.

The parts, one concern each: what is replayed (:mod:`runtime.whatif.replay`: the arrivals, the
prompts rebuilt from their shape), the simulator that replays (:mod:`runtime.whatif.sim`, fitted to
a real-time run by :mod:`runtime.whatif.calibrate`), the replays of a setting
(:mod:`runtime.whatif.predict`), measuring them and the run alike (:mod:`runtime.whatif.measure`),
and anchoring the predictions on what the run did (:mod:`runtime.whatif.anchor`). Here:
:func:`preview`, the two settings side by side; every name of the parts is importable from here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from wavepp.runtime.control.knobs import Knobs
from wavepp.runtime.whatif.anchor import anchored
from wavepp.runtime.whatif.measure import (
    idle_shares,
    measured_figures,
    median_run,
    observed_in,
    observed_over,
    observed_since,
)
from wavepp.runtime.whatif.noise import MIN_NOISE, ReplayError, gain, replay_error
from wavepp.runtime.whatif.predict import (
    DEFAULT_TIME_LIMIT_S,
    Deadline,
    Prediction,
    Progress,
    TimeLimit,
    predict,
    predict_each,
    replay_once,
)
from wavepp.runtime.whatif.replay import (
    DEFAULT_WINDOW_S,
    MAX_ARRIVALS,
    MEASURE_MARGIN_FRACTION,
    MEASURE_MARGIN_PER_CLIENT,
    MIN_ARRIVALS,
    Arrival,
    Replay,
    Span,
    WhatIfError,
    arrivals_from_spans,
    check_replay,
    knobs_at_end,
    max_outstanding,
    measured_bounds,
    rebuild_trace,
    replay_of,
)
from wavepp.runtime.whatif.sim import CPU_CLOCK_REPEATS, NO_CALIBRATION, SimSpec, calibrated, sim_spec

__all__ = [
    "Arrival", "CPU_CLOCK_REPEATS", "DEFAULT_TIME_LIMIT_S", "DEFAULT_WINDOW_S", "Deadline", "MAX_ARRIVALS",
    "MEASURE_MARGIN_FRACTION", "MEASURE_MARGIN_PER_CLIENT", "MIN_ARRIVALS", "MIN_NOISE", "NO_CALIBRATION", "Prediction",
    "PreviewResult", "Progress", "Replay", "ReplayError", "SimSpec", "Span", "TimeLimit", "WhatIfError", "anchored",
    "arrivals_from_spans", "calibrated", "check_replay", "gain", "idle_shares", "knobs_at_end", "max_outstanding",
    "measured_bounds", "measured_figures", "median_run", "observed_in", "observed_over", "observed_since", "predict",
    "predict_each", "preview", "rebuild_trace", "replay_error", "replay_of", "replay_once", "sim_spec",
]


@dataclass(frozen=True, slots=True)
class PreviewResult:
    current: Prediction
    proposed: Prediction
    changes: dict[str, Any]
    replay_note: str
    sim: str
    error: ReplayError            # the replay's own error: a change within it is within noise

    @property
    def throughput_gain(self) -> float | None:
        return gain(self.current.figures.input_tokens_per_s, self.proposed.figures.input_tokens_per_s)

    @property
    def within_noise(self) -> bool:
        return self.error.within(self.throughput_gain)


def preview(replay: Replay, spec: SimSpec, current: Knobs, proposed: Knobs,
            time_limit_s: float = DEFAULT_TIME_LIMIT_S, progress: Progress | None = None) -> PreviewResult:
    """The replay under the current and the proposed knobs, side by side."""
    check_replay(replay)
    deadline = Deadline(time_limit_s, 2 * spec.repeats, progress)
    spec = calibrated(replay, spec)
    now, then = predict_each(replay, spec, [(current, "current knobs"), (proposed, "proposed knobs")], deadline)
    observed = observed_in(replay, spec.pp)
    error = replay_error(now.figures, now.throughputs, observed)
    if spec.clock == "cpu":       # a real-time run: the replay's speed is the machine's (whatif_anchor)
        now, then = anchored([now, then], now.figures, observed)
    old = current.as_dict()
    changes = {k: v for k, v in proposed.as_dict().items() if old[k] != v}
    return PreviewResult(now, then, changes, replay.note, spec.describe, error)
