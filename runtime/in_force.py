"""What the knobs in force make of a run: the policy (laid on the run's pool and stages, which stay what the
engine built), the admission round it runs, the planner and its room, and the ring of waves in flight.

:class:`InForce` is built at the start of a run and configured again at a wave boundary when the knobs change
(and once after the warm-up, so the measured run plans from scratch). Knobs written meanwhile wait here
(:meth:`InForce.set`) for the boundary (:meth:`InForce.apply_pending`); what changed, and knobs refused, become
events on the next wave's plan span. The dispatcher plans with it; the stage tasks and completion read the
policy in force through :meth:`InForce.current_policy`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from wavepp.runtime.admission import Admission
from wavepp.runtime.control.knobs import Knobs, check_block_size
from wavepp.runtime.kvcache.handle import StageHandle
from wavepp.runtime.planning.planner import Planner, Room
from wavepp.runtime.planning.step_times import StepTimes
from wavepp.runtime.policies import get_policy
from wavepp.runtime.policies.base import Policy
from wavepp.runtime.run_state import RunState
from wavepp.store.base import Store
from wavepp.telemetry import names as N
from wavepp.telemetry.setup import Telemetry


class InForce:
    def __init__(self, handles: Sequence[StageHandle], store: Store, block_size: int, telemetry: Telemetry,
                 step_times: StepTimes, run_state: RunState, knobs: Knobs) -> None:
        self.handles = list(handles)
        self.store = store
        self.block_size = block_size
        self.tel = telemetry
        self.step_times = step_times
        self.run_state = run_state
        start = get_policy(knobs.policy)     # the engine built the caches and laid out the stages by it
        self.pool, self.topology = start.pool, start.topology    # fixed for the run
        self.pending: Knobs | None = None
        self.events: list[tuple[str, dict[str, Any]]] = []     # knob changes and refusals: on the next wave plan
        self.configure(knobs)

    def configure(self, knobs: Knobs) -> None:
        """Policy, admission, planner and ring from ``knobs``. A policy switched to runs on the run's pool and
        stages (its own apply from the next run; the knob-change event says so)."""
        self.knobs = knobs
        for h in self.handles:                  # before the admission below reads each stage's resume step
            h.set_snapshot_interval(knobs.snapshot_interval)
        self.policy: Policy = dataclasses.replace(get_policy(knobs.policy), pool=self.pool, topology=self.topology)
        num_stages = len(self.handles)
        self.admit_stages = self.policy.stage_admission.admit_stages(num_stages)
        p = self.policy
        self.admission = Admission(self.handles, self.admit_stages, self.store, self.block_size, self.tel,
                                   p.lookup, p.reserve, p.name, p.share, p.charge)
        self.planner: Planner = p.make_planner(knobs, num_stages, self.block_size, self.step_times,
                                               self.run_state.waiting)
        self.ring = p.ring_size(knobs, num_stages)

    def set(self, knobs: Knobs) -> None:
        """Apply ``knobs`` at the next wave boundary (KnobError now if this deployment cannot use them)."""
        self.pending = check_block_size(knobs, self.block_size)

    def refused(self, version: int, reason: str) -> None:
        """Knobs written to the store that this deployment refused: an event on the next wave's plan."""
        self.events.append((N.EVENT_KNOBS_REFUSED, {N.KNOBS_VERSION: version, N.ERROR: reason}))

    def apply_pending(self) -> dict[str, Any] | None:
        """At a wave boundary: the knobs set since the last one, configured; returns what changed (None:
        nothing). A new policy keeps the run's pool and stages; the event says so."""
        knobs, self.pending = self.pending, None
        if knobs is None or knobs == self.knobs:
            return None
        old = self.knobs.as_dict()
        changed = {k: v for k, v in knobs.as_dict().items() if old[k] != v}
        self.configure(knobs)
        new = get_policy(knobs.policy)
        fixed = ((N.KNOBS_POOL_KEPT, self.pool, new.pool), (N.KNOBS_TOPOLOGY_KEPT, self.topology, new.topology))
        kept = {key: ours.name for key, ours, theirs in fixed if theirs != ours}
        self.events.append((N.EVENT_KNOBS, {N.KNOBS_CHANGED: sorted(changed), **kept,
                                            **{f"wavepp.knobs.{k}": v for k, v in changed.items()}}))
        return changed

    def current_policy(self) -> Policy:
        return self.policy

    def room(self) -> Room | None:
        """The room a request joins a wave in, where the policy's lookup moment says it looks up then."""
        return self.policy.lookup_at.room(self.planner, self.run_state.active())
