"""One view of a run: the source's snapshot, its tables and its figures (DESIGN §7)."""

from __future__ import annotations

from dataclasses import dataclass

from dashboard.frames import Frames, build
from dashboard.sources import Snapshot, Source
from runtime.report import RunFigures, compute_figures
from telemetry import names as N


@dataclass(slots=True)
class View:
    snap: Snapshot
    frames: Frames
    figures: RunFigures | None
    source: Source

    @property
    def empty(self) -> bool:
        return not self.snap.spans


def make_view(source: Source, snap: Snapshot) -> View:
    fr = build(snap.spans, snap.num_stages or None)
    figures = None
    if any(s["n"] == N.REQUEST for s in snap.spans) and fr.num_stages:
        policy = next((s["a"].get(N.POLICY) for s in snap.spans if s["n"] == N.REQUEST), "")
        meta = {"policy": policy, "engine": source.kind, "model": "", "hardware": "", "concurrency": 0,
                "workload": "", "inline_admission": policy != "wavepp"}
        figures = compute_figures(snap.spans, fr.num_stages, meta)
    return View(snap, fr, figures, source)


class ViewCache:
    """The last view of each run, keyed on the snapshot's position (spans received, status, knobs):
    tables and figures are recomputed only when the position moved, so a finished run costs
    nothing but its poll however often it is drawn."""

    def __init__(self, keep: int = 16) -> None:
        self.keep = keep
        self._views: dict[str, View] = {}

    def view(self, source: Source, snap: Snapshot) -> View:
        cached = self._views.get(snap.run_id)
        if cached is not None and snap.position and cached.snap.position == snap.position:
            return View(snap, cached.frames, cached.figures, source)    # the banner's fields may have moved
        view = make_view(source, snap)
        self._views.pop(snap.run_id, None)
        self._views[snap.run_id] = view
        while len(self._views) > self.keep:
            del self._views[next(iter(self._views))]
        return view
