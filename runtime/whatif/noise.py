"""The replay's own error, measured on every preview and suggestion, and what it makes of a
prediction: a predicted change no larger than it is *within noise* - shown so, never ranked, never
proposed (:class:`ReplayError`).

Two things say how far a replay can be off: the replay of the current knobs against what the run
itself did over the same arrivals (``baseline``: a deterministic virtual-time replay of a sim run
reproduces it; a real-time run's replay does not, and its predictions are anchored on the run, which
moves them all alike but leaves how far the replay was off as its uncertainty), and, where a setting
is replayed several times, how far apart those replays came (``spread``). Below both, a floor: a
predicted gain under :data:`MIN_NOISE` is not worth a knob change even where the replay is exact.
"""

from __future__ import annotations

from dataclasses import dataclass

from wavepp.runtime.figures.report import RunFigures
from wavepp.runtime.whatif.replay import MIN_ARRIVALS

MIN_NOISE = 0.01       # relative: a predicted change under 1 % is within noise whatever the replay's error


def gain(before: float | None, after: float | None) -> float | None:
    """``after`` relative to ``before`` (+0.1: 10 % more); None when either is unknown or ``before`` is 0."""
    return after / before - 1 if before and after is not None else None


@dataclass(frozen=True, slots=True)
class ReplayError:
    """How far the what-if's replay is from what it stands for (module doc)."""

    baseline: float | None        # the current knobs' replay vs the run over the same arrivals (None: not known)
    spread: float = 0.0           # the current knobs' replays: (max - min) / median input tok/s (one replay: 0)

    @property
    def noise(self) -> float:
        """The largest relative change that says nothing: the error, at least :data:`MIN_NOISE`."""
        return max(abs(self.baseline or 0.0), self.spread, MIN_NOISE)

    def within(self, change: float | None) -> bool:
        """A relative change (a gain) no larger than the noise, or unknown."""
        return change is None or abs(change) <= self.noise

    def describe(self) -> str:
        parts = [f"the replay of the current knobs vs the run: {self.baseline:+.1%}" if self.baseline is not None
                 else "no run over the same arrivals to check the replay against"]
        if self.spread >= 0.0005:       # shown where it rounds to something
            parts.append(f"its replays {self.spread:.1%} apart")
        floor = " (the floor)" if self.noise == MIN_NOISE else ""
        return f"replay error ±{self.noise:.1%}{floor}: {', '.join(parts)}; a change within it is within noise"


def replay_error(replayed: RunFigures, throughputs: tuple[float, ...], observed: RunFigures | None) -> ReplayError:
    """The error of the current knobs' replay (``replayed``: before any anchoring; ``throughputs``: each
    replay's input tok/s) against what the run did over the same arrivals (``observed``; None: unknown)."""
    known = observed is not None and observed.completed >= MIN_ARRIVALS
    baseline = gain(observed.input_tokens_per_s, replayed.input_tokens_per_s) if known and observed else None
    ranked = sorted(throughputs)
    middle = ranked[(len(ranked) - 1) // 2] if ranked else 0.0
    spread = (ranked[-1] - ranked[0]) / middle if len(ranked) > 1 and middle > 0 else 0.0
    return ReplayError(baseline, spread)
