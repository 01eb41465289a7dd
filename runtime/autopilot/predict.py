"""The autopilot's predictor: Suggest's search (:func:`runtime.whatif.suggest.suggest`) on the replay of
the arrivals of the window and the one before, in the simulator built like the engine that ran, under the
operator's time limit; every setting it tried becomes a candidate with its predicted input throughput.

Where the search runs: beside a virtual-time run, in this process (the loop waits for it, no time passes);
beside a real-time run, in a child process at the lowest CPU priority (:class:`SearchProcess`). Run on a
thread of the runtime's own process, its replays took the cores and the GIL from the stages they were
judging: on the torch engine (tiny-llama, PP2, 2 cores, ``make bench-autopilot-torch``) the autopilot cost
6 % of the chat and docs phases' throughput and raised docs' prefill p99 from 3.3 to 4.9 s while changing
no knob."""

from __future__ import annotations

import dataclasses
import functools
import multiprocessing
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any, TypeVar

from wavepp.runtime.autopilot.pilot import Candidate, Predictor, Search
from wavepp.runtime.autopilot.settings import AutopilotSettings
from wavepp.runtime.autopilot.window import Span, WindowFigures
from wavepp.runtime.control.knobs import KnobError, Knobs, from_changes
from wavepp.runtime.whatif.preview import WhatIfError, max_outstanding, replay_of, sim_spec
from wavepp.runtime.whatif.replay import Replay
from wavepp.runtime.whatif.sim import SimSpec
from wavepp.runtime.whatif.suggest import Goal, Suggestion, suggest

T = TypeVar("T")
Searcher = Callable[[Replay, SimSpec, Knobs, AutopilotSettings], Suggestion]


def search_here(replay: Replay, spec: SimSpec, knobs: Knobs, settings: AutopilotSettings) -> Suggestion:
    """Suggest's search for throughput within the time limit, over the settings the bounds allow."""
    return suggest(replay, spec, knobs, Goal("throughput"), time_limit_s=settings.search_s,
                   within=functools.partial(settings.allows, knobs))       # nothing it could not apply


PARENT_POLL_S = 1.0      # how often the search child looks whether the runtime that spawned it is still there


def _search_child(parent: int) -> None:
    """The search child's start: the lowest CPU priority, and an exit once the runtime that spawned it is gone.
    A runtime killed outright (SIGKILL, the OOM killer) never shuts its pool down, and the child would wait
    for work on its queue forever."""
    os.nice(19 - os.nice(0))

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(PARENT_POLL_S)
        os._exit(0)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


class SearchProcess:
    """:func:`search_here` in a child process at the lowest CPU priority (module doc), spawned on the first
    search and kept (a fork of the runtime would copy its threads' locks: asyncio's, torch's pools); it
    exits by itself when the runtime is killed."""

    def __init__(self) -> None:
        self._pool: ProcessPoolExecutor | None = None

    def __call__(self, replay: Replay, spec: SimSpec, knobs: Knobs, settings: AutopilotSettings) -> Suggestion:
        return self.call(search_here, replay, spec, knobs, settings)

    def call(self, fn: Callable[..., T], *args: Any) -> T:
        if self._pool is None:
            self._pool = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"),
                                             initializer=_search_child, initargs=(os.getpid(),))
        future: Future[T] = self._pool.submit(fn, *args)
        try:
            return future.result()
        except BrokenProcessPool:
            self._pool = None                 # died (killed, out of memory): a new one at the next search
            raise WhatIfError("the search process died; the next window starts a new one") from None

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None


def suggest_predictor(meta: Mapping[str, Any], spans: Callable[[], Sequence[Span]],
                      search: Searcher = search_here) -> Predictor:
    """``meta``: the run's description (what the simulator is built like); ``spans``: the spans the
    runner holds (the window's and the one before); ``search``: where the search runs (module doc)."""

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
            found = search(replay, sim_spec(meta), knobs, settings)
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
