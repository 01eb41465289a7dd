"""The autopilot's decisions, one per window: pure (no clock, no store, no replay of its own), so every
rule below is tested on its own.

A window, in order:

1. **Verdict** on the last apply, in the first whole window run under it: the observed gain over the
   window before the apply against the predicted one. Worse than before by more than the noise band
   -> roll back (the knobs before the apply), ban the setting until the workload shifts, cool down
   ``cooldown`` windows. Either way the setting's *correction* is kept: observed / predicted, relative
   to the same ratio of the setting it replaced (Dynamo's planner corrects its model by actual /
   expected the same way); the next search multiplies that setting's prediction by it.
2. **Drain**: nothing changes once the arrivals are over.
3. **Noise band**: the relative throughput change between consecutive windows that ran the same knobs
   on a settled workload, the largest of the last :data:`NOISE_SAMPLES` (until two exist:
   :data:`DEFAULT_BAND`). A verdict worse than before by more than this is a rollback.
4. **Search** when the workload has settled (no shift since the window before) into something the
   last search was not about (the first window too). The predictor replays the window's arrivals
   under candidate settings; the best allowed one is taken when its corrected gain clears the
   prediction's own measured error plus ``margin``; ``advise`` then only says so.
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from wavepp.runtime.autopilot.settings import TUNED, AutopilotSettings
from wavepp.runtime.autopilot.window import WindowFigures, WorkloadStats
from wavepp.runtime.control.knobs import Knobs

NOISE_SAMPLES = 8
DEFAULT_BAND = 0.05
MIN_BAND = 0.02


@dataclass(frozen=True, slots=True)
class Candidate:
    knobs: Knobs
    predicted_tps: float          # the replay's input tok/s under this setting


@dataclass(frozen=True, slots=True)
class Search:
    """What a predictor returns: the replay of the current knobs, the candidates', and the replay's error."""
    current_tps: float
    error: float                  # relative: a predicted gain within it is noise (runtime.whatif.noise)
    candidates: Sequence[Candidate]
    tried: int = 0
    planned: int = 0
    note: str = ""

    @property
    def complete(self) -> bool:
        return self.tried >= self.planned


Predictor = Callable[[WindowFigures, Knobs, AutopilotSettings], Search]


def setting_key(knobs: Knobs) -> tuple[Any, ...]:
    """What identifies a setting for the autopilot: the tuned knobs and the policy."""
    d = knobs.as_dict()
    return (d["policy"], *(d[k] for k in TUNED))


def changes(before: Knobs, after: Knobs) -> dict[str, Any]:
    old = before.as_dict()
    return {k: v for k, v in after.as_dict().items() if old[k] != v}


@dataclass(slots=True)
class Decision:
    window: WindowFigures
    action: str                   # hold | search | keep | advise | apply | rollback | drain | cooldown | frozen
    why: str
    shift: str | None = None
    knobs: Knobs | None = None    # what to write (apply, rollback); None: nothing
    chosen: dict[str, Any] = field(default_factory=dict)
    predicted_gain: float | None = None
    error: float | None = None
    band: float | None = None
    verdict: str | None = None    # on the last apply: kept, rolled back, inconclusive
    observed_gain: float | None = None
    candidates: list[tuple[dict[str, Any], float]] = field(default_factory=list)   # (changes, corrected gain)
    version: int | None = None    # the knob version written (the runner sets it)

    def attributes(self) -> dict[str, Any]:
        """The decision span's attributes (telemetry.names: wavepp.autopilot.*)."""
        from wavepp.telemetry import names as N
        out: dict[str, Any] = {N.AUTOPILOT_ACTION: self.action, N.AUTOPILOT_WHY: self.why[:500],
                               N.AUTOPILOT_WINDOW: json.dumps(self.window.as_dict())}
        if self.shift:
            out[N.AUTOPILOT_SHIFT] = self.shift
        if self.chosen:
            out[N.AUTOPILOT_CHOSEN] = json.dumps(self.chosen)
        for key, value in ((N.AUTOPILOT_PREDICTED_GAIN, self.predicted_gain), (N.AUTOPILOT_ERROR, self.error),
                           (N.AUTOPILOT_BAND, self.band), (N.AUTOPILOT_OBSERVED_GAIN, self.observed_gain)):
            if value is not None:
                out[key] = float(value)
        if self.verdict:
            out[N.AUTOPILOT_VERDICT] = self.verdict
        if self.version is not None:
            out[N.AUTOPILOT_VERSION] = self.version
        if self.candidates:
            out[N.AUTOPILOT_CANDIDATES] = json.dumps([{"changes": c, "gain": round(g, 4)}
                                                      for c, g in self.candidates[:8]])
        return out


@dataclass(frozen=True, slots=True)
class _Pending:
    window: int                   # the window the apply was decided in (mixed: the next one is judged)
    previous: Knobs
    applied: Knobs
    before_tps: float             # the window the decision was made on
    predicted_gain: float
    ratio_before: float           # observed / predicted of the setting replaced (its replay on that window)
    predicted_tps: float          # the applied setting's raw prediction


class Pilot:
    def __init__(self) -> None:
        self.last: WindowFigures | None = None
        self.tuned_for: WorkloadStats | None = None     # the statistics the last search was about
        self.pending: _Pending | None = None
        self.corrections: dict[tuple[Any, ...], float] = {}
        self.banned: set[tuple[Any, ...]] = set()
        self.cooldown_until = -1
        self.changed: set[int] = set()                  # windows in which the knobs changed (not noise samples)
        self._noise: deque[float] = deque(maxlen=NOISE_SAMPLES)

    @property
    def band(self) -> float:
        return max(MIN_BAND, max(self._noise)) if len(self._noise) >= 2 else DEFAULT_BAND

    def step(self, w: WindowFigures, knobs: Knobs, settings: AutopilotSettings, draining: bool,
             predict: Predictor) -> Decision:
        last, self.last = self.last, w
        self.changed = {i for i in self.changed if i >= w.index}
        shift = w.stats.shift_from(last.stats, rate=w.index not in self.changed) if last is not None else None
        if shift:
            self.banned.clear()                      # a setting that lost on another workload may win here
        verdict = self._verdict(w, knobs, shift, settings)
        if verdict is not None:
            return verdict
        if last is not None and not shift and w.index not in self.changed and last.input_tps > 0:
            self._noise.append(abs(w.input_tps - last.input_tps) / last.input_tps)
        if draining:
            return Decision(w, "drain", "the arrivals are over: no change during the drain", shift, band=self.band)
        if settings.frozen:
            return Decision(w, "frozen", settings.frozen_why or "frozen by the operator", shift, band=self.band)
        if w.index <= self.cooldown_until:
            return Decision(w, "cooldown", f"after a rollback, until window {self.cooldown_until}", shift,
                            band=self.band)
        if last is None or shift or not w.completed:
            why = "the first window" if last is None else "the workload shifted" if shift else "nothing completed"
            return Decision(w, "hold", f"{why}: waiting for a settled window", shift, band=self.band)
        if self.tuned_for is not None and w.stats.shift_from(self.tuned_for) is None:
            return Decision(w, "hold", "the workload is the one the last search was about", band=self.band)
        return self._search(w, knobs, settings, predict)

    def _verdict(self, w: WindowFigures, knobs: Knobs, shift: str | None,
                 settings: AutopilotSettings) -> Decision | None:
        p = self.pending
        if p is None or w.index <= p.window:
            return None
        self.pending = None
        observed = w.input_tps / p.before_tps - 1 if p.before_tps > 0 else None
        if shift or observed is None:
            return Decision(w, "keep", "the workload shifted meanwhile: the apply is not judged", shift,
                            verdict="inconclusive", observed_gain=observed, predicted_gain=p.predicted_gain,
                            band=self.band)
        if p.predicted_tps > 0 and p.ratio_before > 0:
            self.corrections[setting_key(p.applied)] = (w.input_tps / p.predicted_tps) / p.ratio_before
        band = self.band
        if observed < -band:
            self.banned.add(setting_key(p.applied))
            self.cooldown_until = w.index + settings.cooldown
            self.tuned_for = None                    # the search was wrong: search again after the cooldown
            self.changed.add(w.index + 1)
            return Decision(w, "rollback", f"observed {observed:+.1%} against the window before (noise band "
                            f"{band:.1%}; predicted {p.predicted_gain:+.1%}): back to the knobs before",
                            shift, knobs=p.previous, chosen=changes(knobs, p.previous), verdict="rolled back",
                            observed_gain=observed, predicted_gain=p.predicted_gain, band=band)
        self.tuned_for = w.stats                     # what the workload looks like under the setting kept
        return Decision(w, "keep", f"observed {observed:+.1%} (predicted {p.predicted_gain:+.1%}, noise band "
                        f"{band:.1%}): the setting stays", shift, verdict="kept", observed_gain=observed,
                        predicted_gain=p.predicted_gain, band=band)

    def _search(self, w: WindowFigures, knobs: Knobs, settings: AutopilotSettings, predict: Predictor) -> Decision:
        search = predict(w, knobs, settings)
        self.tuned_for = w.stats
        if search.current_tps <= 0:
            return Decision(w, "keep", f"the replay of the current knobs completed nothing ({search.note})",
                            band=self.band)
        ratio_now = w.input_tps / search.current_tps
        scored = []
        for c in search.candidates:
            if setting_key(c.knobs) == setting_key(knobs) or not settings.allows(knobs, c.knobs) \
                    or setting_key(c.knobs) in self.banned:
                continue
            corrected = c.predicted_tps * self.corrections.get(setting_key(c.knobs), 1.0)
            scored.append((corrected / search.current_tps - 1, c))
        scored.sort(key=lambda t: t[0], reverse=True)
        listed = [(changes(knobs, c.knobs), g) for g, c in scored]
        need = search.error + settings.margin
        partial = "" if search.complete else f" (a partial search: {search.tried} of {search.planned} settings)"
        if not scored or scored[0][0] <= need:
            top = f"the best, {scored[0][0]:+.1%}," if scored else "no allowed setting"
            return Decision(w, "keep", f"{top} does not clear the replay's error {search.error:.1%} + margin "
                            f"{settings.margin:.1%}{partial}", error=search.error, band=self.band,
                            candidates=listed)
        gain, best = scored[0]
        chosen = changes(knobs, best.knobs)
        why = f"predicted {gain:+.1%} over the current knobs, clearing the replay's error {search.error:.1%} + " \
              f"margin {settings.margin:.1%}{partial}"
        if settings.mode != "on":
            return Decision(w, "advise", why, knobs=None, chosen=chosen, predicted_gain=gain, error=search.error,
                            band=self.band, candidates=listed)
        self.pending = _Pending(w.index, knobs, best.knobs, w.input_tps, gain, ratio_now, best.predicted_tps)
        self.changed.add(w.index + 1)
        return Decision(w, "apply", why, knobs=best.knobs, chosen=chosen, predicted_gain=gain, error=search.error,
                        band=self.band, candidates=listed)
