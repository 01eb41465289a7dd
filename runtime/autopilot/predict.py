"""The autopilot's predictor: Suggest's search (:func:`runtime.whatif.suggest.suggest`) on the replay of
the arrivals of the window and the one before, in the simulator built like the engine that ran, under the
operator's time limit; every setting it tried becomes a candidate with its predicted input throughput."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from wavepp.runtime.autopilot.pilot import Candidate, Predictor, Search
from wavepp.runtime.autopilot.settings import AutopilotSettings
from wavepp.runtime.autopilot.window import Span, WindowFigures
from wavepp.runtime.control.knobs import KnobError, Knobs, from_changes
from wavepp.runtime.whatif.preview import WhatIfError, max_outstanding, replay_of, sim_spec
from wavepp.runtime.whatif.suggest import Goal, suggest


def suggest_predictor(meta: Mapping[str, Any], spans: Callable[[], Sequence[Span]]) -> Predictor:
    """``meta``: the run's description (what the simulator is built like); ``spans``: the spans the
    runner holds (the window's and the one before)."""

    def predict(w: WindowFigures, knobs: Knobs, settings: AutopilotSettings) -> Search:
        # Every request the runner holds (this window's and the one before, the same workload: a search
        # runs on a settled one), the most recent MAX_ARRIVALS: where a prefill outlasts the window, the
        # window's own arrivals that ended in it are too few to replay.
        held = [s for s in spans() if (s["t1"] or 0) < w.t1_ns]
        try:
            replay = replay_of(held, meta, None)
            if replay.open_loop and replay.concurrency and max_outstanding(replay.arrivals) >= replay.concurrency:
                # The concurrency cap bound: the requests arrived as others completed, at the current knobs'
                # pace, and replayed at those times every setting would look alike. Replayed as the closed
                # loop they were instead (the next one as one finishes), as a closed-loop run's are.
                replay = dataclasses.replace(replay, open_loop=False)
            found = suggest(replay, sim_spec(meta), knobs, Goal("throughput"), time_limit_s=settings.search_s,
                            within=lambda k: settings.allows(knobs, k))     # nothing it could not apply
        except WhatIfError as exc:
            return Search(0.0, 0.0, (), note=str(exc))
        # Like with like: each setting's screening replay against the current knobs' own (tried[0]). The
        # Suggestion's `current` of a real-time run is anchored on the run (moved to what it observed), and a
        # raw candidate over it would read the replay's error as a gain; the pilot's correction factor
        # relates the replays to what the run observes.
        candidates = []
        for p in found.tried[1:]:
            try:
                candidates.append(Candidate(from_changes(p.knobs, {}), p.replayed.input_tokens_per_s or 0.0))
            except KnobError:
                continue
        current = found.tried[0].replayed.input_tokens_per_s if found.tried else None
        return Search(current or 0.0, found.error.noise, candidates, len(found.tried), found.planned,
                      found.replay_note)

    return predict
