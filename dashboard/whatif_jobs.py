"""Preview and Suggest off the render path: a job runs the what-if replays (:mod:`runtime.whatif.preview`) in a
thread while the page shows its progress; the page only reads the job. No Streamlit here.

The replays run in the dashboard's process, never in the runtime's: the embedded runtime has a
process of its own, and a live deployment is elsewhere, so a preview takes no time from the pipeline.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from wavepp.runtime.whatif.preview import Replay, SimSpec, WhatIfError, knobs_at_end, replay_of, sim_spec
from wavepp.telemetry import names as N

Span = dict[str, Any]


class Job:
    """One what-if computation in a daemon thread: its progress while it runs, then its result or the
    one-line reason it could not run."""

    def __init__(self, kind: str, work: Callable[[Callable[[float, str], None]], Any], time_limit_s: float,
                 replay: Replay | None = None) -> None:
        self.kind = kind                      # "preview" | "suggest"
        self.time_limit_s = time_limit_s
        self.replay = replay                  # what it replays (the page checks the current knobs against the run)
        self.started = time.monotonic()
        self.fraction = 0.0
        self.label = "starting"
        self.result: Any = None
        self.error: str | None = None
        self.finished: float | None = None
        self._thread = threading.Thread(target=self._run, args=(work,), name=f"wavepp-{kind}", daemon=True)
        self._thread.start()

    def _progress(self, fraction: float, label: str) -> None:
        self.fraction, self.label = fraction, label

    def _run(self, work: Callable[[Callable[[float, str], None]], Any]) -> None:
        try:
            self.result = work(self._progress)
        except WhatIfError as exc:
            self.error = str(exc)
        except Exception as exc:               # noqa: BLE001 - the page shows it in one line, never a traceback
            self.error = f"{type(exc).__name__}: {(str(exc).splitlines() or [''])[0]}"
        finally:
            self.fraction = 1.0
            self.finished = time.monotonic()

    @property
    def running(self) -> bool:
        return self.finished is None

    @property
    def elapsed_s(self) -> float:
        return (self.finished or time.monotonic()) - self.started

    def wait(self, timeout_s: float) -> bool:
        self._thread.join(timeout_s)
        return not self.running


@dataclass(frozen=True, slots=True)
class Inputs:
    replay: Replay
    sim: SimSpec


def inputs(spans: Sequence[Span], meta: Mapping[str, Any], window_s: float | None,
           cost_profile: str | None) -> Inputs:
    """What a preview of the shown run replays, and in which sim; WhatIfError says why it cannot."""
    if not meta.get("engine"):
        raise WhatIfError("this source does not say which engine, model and hardware ran (the store holds no "
                          "description of this run: a runtime older than this dashboard started it): preview a "
                          "saved run (`wavepp preview FILE`) or the embedded runtime")
    return Inputs(replay_of(spans, meta, window_s), sim_spec(meta, cost_profile or None))


def saved_knobs(meta: Mapping[str, Any]) -> Any:
    """The knobs a saved run ended with (its form's starting values)."""
    return knobs_at_end(meta, meta.get("knob_changes") or [])


def change_time_ns(spans: Sequence[Span], changes: Mapping[str, Any], after_ns: int) -> int | None:
    """When the runtime applied ``changes`` (the event on the plan span of the first wave under them), at
    or after ``after_ns``; None while it has not yet."""
    for s in spans:
        if s["n"] != N.WAVE_PLAN:
            continue
        for ev in s.get("ev", ()):
            if ev[0] != N.EVENT_KNOBS or ev[1] < after_ns:
                continue
            applied = {k.removeprefix("wavepp.knobs."): v for k, v in ev[2].items() if k != N.KNOBS_CHANGED}
            if all(applied.get(k) == v for k, v in changes.items()):
                return int(ev[1])
    return None
