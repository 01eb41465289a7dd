"""Anchoring: predictions moved by what separates the replay of the current knobs from what the run
itself did over the same arrivals (:func:`anchored`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

from wavepp.runtime.figures.report import RunFigures
from wavepp.runtime.whatif.predict import Prediction
from wavepp.runtime.whatif.replay import MIN_ARRIVALS


def anchored(predictions: Sequence[Prediction], current: RunFigures, observed: RunFigures | None) -> list[Prediction]:
    """Each prediction moved by what separates the replay of the current knobs (``current``) from
    what the run did over the same arrivals (``observed``): rates, makespan and prefill latencies by
    the ratio. The replays' speed is the part a preview knows least (the machine's load when it runs
    against when the run ran, prompts rebuilt from their shape); their differences are what it is
    for. Pipeline efficiency stays as replayed: a ratio of busy to elapsed time, a machine uniformly
    slower leaves it as it is, and an offset of the replay's (measured: mostly the preview competing
    with the runtime for the cores) did not carry over to other settings (it moved a ring=1 change's
    efficiency 0.05-0.07 off, where the replays alone were within 0.005). The same when ``observed``
    says too little. Only a run on the wall clock is anchored: a virtual-time sim run's replay is the
    same model, and what separates it from the run is the replay's error (runtime.whatif.noise),
    shown, never scaled away."""
    if observed is None or observed.completed < MIN_ARRIVALS or not current.input_tokens_per_s \
            or not observed.input_tokens_per_s:
        return list(predictions)
    rate = observed.input_tokens_per_s / current.input_tokens_per_s

    def by_ratio(figure: Callable[[RunFigures], float | None], f: RunFigures) -> float | None:
        value, o, c = figure(f), figure(observed), figure(current)
        return value * o / c if value is not None and o is not None and c else value

    def move(f: RunFigures) -> RunFigures:
        return dataclasses.replace(
            f, input_tokens_per_s=by_ratio(lambda r: r.input_tokens_per_s, f),
            computed_tokens_per_s=f.computed_tokens_per_s * rate if f.computed_tokens_per_s is not None else None,
            makespan_s=f.makespan_s / rate if f.makespan_s is not None else None,
            prefill_latency_p50_s=by_ratio(lambda r: r.prefill_latency_p50_s, f),
            prefill_latency_p95_s=by_ratio(lambda r: r.prefill_latency_p95_s, f),
            prefill_latency_p99_s=by_ratio(lambda r: r.prefill_latency_p99_s, f))

    return [dataclasses.replace(p, figures=move(p.replayed), raw=p.replayed) for p in predictions]
