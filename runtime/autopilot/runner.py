"""The autopilot beside a running loop: every window of the run's clock it reads its settings from the
store, measures the window from the spans it was fed, asks the :class:`~.pilot.Pilot` and writes what
it decided - knobs through the store (the loop applies them at its next wave boundary, as an
operator's), the decision as a span. An operator's own knob write freezes it (until the operator
resumes it); a store it cannot reach pauses it, one log line, and it goes on when the store is back.

The pilot decides on a thread of its own: on the wall clock the loop goes on meanwhile, and the search's
replays run in a child process of the lowest CPU priority (:class:`~.predict.SearchProcess`), off the
stages' cores and GIL; in virtual time the loop waits for it, so the search takes no virtual time and a sim
run with the autopilot stays deterministic.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections import deque
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from wavepp.runtime.autopilot.pilot import Decision, Pilot, Predictor
from wavepp.runtime.autopilot.predict import SearchProcess, search_here, suggest_predictor
from wavepp.runtime.autopilot.settings import AutopilotSettings, SettingsError, from_dict
from wavepp.runtime.autopilot.window import Span, measure
from wavepp.runtime.control.knobs import KnobError, Knobs, from_changes, validated_values
from wavepp.store.base import StoreError
from wavepp.telemetry import names as N

if TYPE_CHECKING:
    from wavepp.runtime.loop import PipelineLoop
    from wavepp.telemetry.ring import SpanRing

log = logging.getLogger(__name__)
T = TypeVar("T")
STORE_TIMEOUT_S = 5.0


def companion(settings: AutopilotSettings, predictor: Predictor | None = None) -> Callable[..., AutopilotRunner]:
    """The autopilot as something to run beside a bench run's loop (``runtime.bench.runs.CompanionFactory``)."""
    def start(loop: PipelineLoop, meta: dict[str, Any], flush: Callable[[], None], virtual: bool) -> AutopilotRunner:
        return AutopilotRunner(loop, settings, predictor, virtual=virtual, flush=flush, meta=meta)
    return start


class AutopilotRunner:
    name = "autopilot"

    def __init__(self, loop: PipelineLoop, settings: AutopilotSettings, predictor: Predictor | None = None,
                 *, virtual: bool, flush: Callable[[], None] = lambda: None,
                 meta: dict[str, Any] | None = None) -> None:
        """``settings``: what the runner publishes when it starts (from then on the store's record wins:
        the operator's changes while it runs);
        ``predictor``: default Suggest's search on the window (:mod:`.predict`); ``flush``: hands over
        the spans the feed still batches; ``virtual``: the loop runs in virtual time."""
        self.loop = loop
        self.settings = settings
        self._searcher = None if virtual or predictor is not None else SearchProcess()
        self.predictor = predictor or suggest_predictor(meta or {}, lambda: list(self._spans),
                                                        self._searcher or search_here)
        self.virtual = virtual
        self.flush = flush
        self.pilot = Pilot()
        self.decisions: list[dict[str, Any]] = []    # every decision's span attributes (bench JSON)
        self._spans: deque[Span] = deque()
        self._mine: set[int] = set()                 # knob versions the autopilot wrote
        self._seen: int | None = None                # the knob version at the last window
        self._paused = False
        self._held_before = 0                   # arrivals the source's concurrency cap held, at the last window
        self._published = False

    def report(self) -> list[dict[str, Any]]:
        """Every decision's span attributes, in order (a bench run's meta["autopilot"])."""
        return self.decisions

    def feed(self, spans: Sequence[Span]) -> None:
        """The run's spans as they end (a ``telemetry.feed.SpanFeed`` consumer)."""
        self._spans.extend(spans)

    def feed_from(self, ring: SpanRing) -> None:
        """Take the run's spans from a span ring (a server's, the embedded runtime's): what it took since
        the last window, at the end of each."""
        seen = 0

        def pull() -> None:
            nonlocal seen
            spans, seen = ring.read(seen)
            self.feed(spans)
        self.flush = pull

    async def run(self) -> None:
        tel = self.loop.tel
        start = tel.now_ns()
        index = 0
        try:                  # publish the settings now: a reader of the store sees them from the start
            await self._read()
        except (StoreError, TimeoutError) as exc:
            log.warning("autopilot: cannot publish its settings yet (%s): at the end of its first window", exc)
        try:
            while True:
                await asyncio.sleep(self.settings.window_s)
                end = tel.now_ns()
                self.flush()
                decision = await self._window(index, start, end)
                if decision is not None:
                    self._record(decision)
                while self._spans and (self._spans[0]["t1"] or 0) < start:   # keep this window and the one before
                    self._spans.popleft()
                index, start = index + 1, end
        finally:
            if self._searcher is not None:
                self._searcher.close()

    async def _window(self, index: int, start: int, end: int) -> Decision | None:
        try:
            settings, knobs = await self._read()
        except (StoreError, TimeoutError) as exc:
            if not self._paused:
                log.warning("autopilot paused: the store cannot be reached (%s); it resumes when it can", exc)
            self._paused = True
            return None
        if self._paused:
            log.warning("autopilot resumed: the store is back")
            self._paused = False
        self.settings = settings
        if settings.mode == "off" or knobs is None:
            return None
        # An open loop's arrival rate is the workload's only in a window its concurrency cap never held an
        # arrival back: where the cap binds, arrivals follow completions (a rate that moves with the knobs).
        held = self.loop.workload.held_by_cap
        rate_is_workload = self.loop.workload.open_loop and held == self._held_before
        self._held_before = held
        w = measure(list(self._spans), index, start, end, self.loop.num_stages, rate_is_workload)
        draining = self.loop.workload.exhausted
        decision = await self._think(lambda: self.pilot.step(w, knobs, settings, draining, self.predictor))
        if decision.knobs is not None and settings.mode == "on":
            try:
                record = await asyncio.wait_for(self.loop.store.knobs_set(
                    decision.chosen, deployment=self.loop.knob_watcher.deployment, validate=validated_values),
                    STORE_TIMEOUT_S)
            except (StoreError, TimeoutError, KnobError) as exc:
                decision.action, decision.why = "paused", f"could not write the knobs ({exc}): {decision.why}"
                self.pilot.pending = None
            else:
                self._mine.add(record.version)
                self._seen = decision.version = record.version
        return decision

    async def _read(self) -> tuple[AutopilotSettings, Knobs | None]:
        """The settings (the store's, else this runner's published) and the knobs in the store, freezing on
        an operator's write."""
        store = self.loop.store
        settings = self.settings
        raw = None if not self._published else await asyncio.wait_for(store.autopilot_get(), STORE_TIMEOUT_S)
        if raw is None:
            await asyncio.wait_for(store.autopilot_put(settings.as_dict()), STORE_TIMEOUT_S)
            self._published = True
        else:
            try:
                settings = from_dict(raw)
            except SettingsError as exc:
                log.warning("%s: keeping the settings it ran with", exc)
        record = await asyncio.wait_for(store.knobs_get(), STORE_TIMEOUT_S)
        if record.version == 0:
            return settings, None
        if self._seen is not None and record.version != self._seen and record.version not in self._mine \
                and not settings.frozen and settings.mode != "off":
            settings = settings.frozen_by(f"an operator wrote knobs version {record.version}: frozen until the "
                                          f"operator resumes it")
            log.warning("autopilot frozen: %s", settings.frozen_why)
            await asyncio.wait_for(store.autopilot_put(settings.as_dict()), STORE_TIMEOUT_S)
        self._seen = record.version
        try:
            return settings, from_changes(record.values, {})
        except KnobError:
            return settings, None

    async def _think(self, decide: Callable[[], T]) -> T:
        """``decide`` on a thread of its own (its replays run event loops of their own): awaited on the
        wall clock, waited for in virtual time (no virtual time passes)."""
        if not self.virtual:
            return await asyncio.to_thread(decide)
        out: list[T] = []
        failed: list[BaseException] = []

        def target() -> None:
            try:
                out.append(decide())
            except BaseException as exc:    # noqa: BLE001 - raised again on the loop's thread
                failed.append(exc)
        thread = threading.Thread(target=target, name="autopilot")
        thread.start()
        thread.join()
        if failed:
            raise failed[0]
        return out[0]

    def _record(self, d: Decision) -> None:
        attrs = d.attributes()
        span = self.loop.tel.start(N.AUTOPILOT_DECISION, attrs, root=True)
        self.loop.tel.end(span)
        self.decisions.append(attrs)
        log.info("autopilot window %d: %s - %s", d.window.index, d.action, d.why)
