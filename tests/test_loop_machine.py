"""The whole loop as a hypothesis state machine: its rules write a schedule of
what happens to a serving runtime - arrivals of prompts sharing prefixes, clients giving up at any
point of their request's life, knob changes (the wave budget, its floor, the ring), policy
switches to any registered preset or single-mechanism ablation, and evictions forced on one stage
(memory pressure from outside the run: residency diverges from the hint index) and stages that die
(the sim's ``fail_stage``) - and the run plays the schedule on
the sim, in virtual time, on uneven pools that diverge across stages, with the invariant checker
(``runtime/guards/invariants.py``) after every wave and at the drain.

Whatever the interleaving, every request ends exactly once, completed or cancelled by its client
(failed only with a stage's death); the loop stops only when a stage died; at the drain no stage
keeps a lease, a ticket, a table or a reference. Hypothesis shrinks a failing schedule to the few events that break it.

``make test`` runs a small profile; ``make test-reliability`` runs it at length (its examples
are counted in hypothesis's statistics).
"""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass

from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, precondition, rule

from tests.test_request_endings import EVERY_POLICY, Served, request
from wavepp.runtime.engines.sim.clock import run_virtual
from wavepp.runtime.engines.sim.executor import StageFailed
from wavepp.runtime.mechanisms.stage_admission import SOURCE_STOPS
from wavepp.runtime.sources.server import CANCELLED

# Per example one virtual-time run of up to STEPS events: about 0.1-0.5 s of wall time each.
LONG = os.environ.get("WAVEPP_HYPOTHESIS_PROFILE") == "reliability"
EXAMPLES, STEPS = (400, 40) if LONG else (25, 20)


@dataclass(frozen=True)
class Arrival:
    at: float              # virtual seconds after the start
    tokens: int
    prefix: int            # prefix group: requests of one group share their first half
    give_up: float | None  # the client cancels this long after it sent the request (None: it waits)


@dataclass(frozen=True)
class Eviction:
    at: float
    stage: int             # modulo the number of stages
    blocks: int


@dataclass(frozen=True)
class Crash:
    at: float
    stage: int             # modulo the number of stages


@dataclass(frozen=True)
class KnobChange:
    at: float
    changes: tuple[tuple[str, object], ...]


class LoopMachine(RuleBasedStateMachine):
    """Rules add events; the teardown plays them on one loop and checks how every request ended."""

    def __init__(self) -> None:
        super().__init__()
        self.arrivals: list[Arrival] = []
        self.changes: list[KnobChange] = []
        self.evictions: list[Eviction] = []
        self.crashes: list[Crash] = []
        self.capacities = (3000, 2500, 2000)

    @initialize(capacities=st.sampled_from([(3000, 2500, 2000), (1500, 400, 900), (600, 600, 600, 250)]))
    def pools(self, capacities: tuple[int, ...]) -> None:
        """Uneven pools (the second: a stage holds a fraction of the others' prefixes)."""
        self.capacities = capacities

    @rule(at=st.floats(0, 0.5), tokens=st.sampled_from([200, 700, 1500, 3500, 7000]), prefix=st.integers(0, 3),
          give_up=st.one_of(st.none(), st.floats(1e-4, 0.5)))
    def arrive(self, at: float, tokens: int, prefix: int, give_up: float | None) -> None:
        self.arrivals.append(Arrival(at, tokens, prefix, give_up))

    @rule(at=st.floats(0, 0.5), budget=st.sampled_from([(1024, 512), (2048, 1024), (4096, 1024), (8192, 4096)]),
          ring=st.integers(0, 8))
    def retune(self, at: float, budget: tuple[int, int], ring: int) -> None:
        self.changes.append(KnobChange(at, (("max_wave_tokens", budget[0]), ("min_wave_tokens", budget[1]),
                                            ("ring", ring))))

    @rule(at=st.floats(0, 0.5), stage=st.integers(0, 3), blocks=st.sampled_from([1, 8, 64, 1 << 20]))
    def pressure(self, at: float, stage: int, blocks: int) -> None:
        """Memory pressure from outside the run: one stage evicts cached blocks nobody holds (all of
        them, at 1 << 20), so it diverges from the others and from the hint index."""
        self.evictions.append(Eviction(at, stage, blocks))

    @precondition(lambda self: not self.crashes)
    @rule(at=st.floats(0, 1.5), stage=st.integers(0, 3))
    def crash(self, at: float, stage: int) -> None:
        """A stage dies (its next step or send fails): the loop fails, every request ends once. At most
        one, often after the work is done (the arrivals end by 0.5 s): most runs still drain whole."""
        self.crashes.append(Crash(at, stage))

    @rule(at=st.floats(0, 0.5), policy=st.sampled_from(EVERY_POLICY))
    def switch(self, at: float, policy: str) -> None:
        self.changes.append(KnobChange(at, (("policy", policy),)))

    def teardown(self) -> None:
        if self.arrivals:
            run_virtual(self._play())

    async def _play(self) -> None:
        served = await Served.start(capacities=self.capacities)
        # As the server does (runtime/serve/runtime.py): a failed loop answers what is in flight.
        served.task.add_done_callback(lambda t: served.source.fail_all(
            str(t.exception()) if not t.cancelled() and t.exception() else "stopped"))
        refused: list[int] = []

        async def client(i: int, a: Arrival) -> None:
            await asyncio.sleep(a.at)
            req = request(i, a.tokens, a.prefix)
            if served.task.done():                          # the loop failed: the server answers 503
                refused.append(i)
                return
            answer = asyncio.ensure_future(served.answer(req))
            if a.give_up is not None:
                await asyncio.sleep(a.give_up)
                await served.source.cancel(req.id)
            await answer

        async def change(c: KnobChange) -> None:
            await asyncio.sleep(c.at)
            served.loop.set_knobs(served.loop.knobs.replace(**dict(c.changes)))   # type: ignore[arg-type]

        async def evict(e: Eviction) -> None:
            await asyncio.sleep(e.at)
            handle = served.loop.handles[e.stage % len(served.loop.handles)]
            if handle.cache.evict_cached(e.blocks):
                served.loop.run_state.index_dirty.notify()    # the publisher sends the detaches

        async def crash(c: Crash) -> None:
            await asyncio.sleep(c.at)
            served.loop.executor.fail_stage(c.stage % len(served.loop.handles), f"stage {c.stage} died")

        jobs = [client(i, a) for i, a in enumerate(self.arrivals)] + [change(c) for c in self.changes] + \
            [evict(e) for e in self.evictions] + [crash(c) for c in self.crashes]
        await asyncio.wait_for(asyncio.gather(*jobs), 600)
        assert len(served.outcomes) + len(refused) == len(self.arrivals)       # each ended exactly once
        switched = any(k == "policy" for c in self.changes for k, _ in c.changes)
        event("a stage died mid-run" if served.task.done() else "drained whole")
        event(f"stages that evicted: {sum(h.cache.stats().num_evictions > 0 for h in served.loop.handles)}")
        if served.task.done():
            # Only a stage's death ends the loop; then every request ended completed, cancelled, or
            # failed with that death, and none hung.
            assert isinstance(served.task.exception(), StageFailed), served.task.exception()
            ended = {o.error for o in served.outcomes.values() if o.completion is None} - {CANCELLED}
            assert all(e.endswith("died") or (switched and e.endswith(SOURCE_STOPS)) for e in ended), ended
            return
        # Completed, or cancelled by its client; or, only after a switch to a policy whose source
        # stops there (a baseline's per-stage capacity check: runtime/mechanisms/stage_admission.py),
        # refused with that cited reason. WavePP's own policy fails nothing.
        ended = [o.error for o in served.outcomes.values() if o.completion is None and o.error != CANCELLED]
        assert all(switched and e.endswith(SOURCE_STOPS) for e in ended), ended[:3]
        waited = [i for i, a in enumerate(self.arrivals) if a.give_up is None]
        assert all(served.outcomes[f"r{i}"].completion is not None or switched for i in waited)
        await served.stop()                                 # the loop still ran; nothing leaked


LoopMachine.TestCase.settings = settings(max_examples=EXAMPLES, stateful_step_count=STEPS, deadline=None,
                                         suppress_health_check=[HealthCheck.too_slow])
TestLoopMachine = LoopMachine.TestCase


def test_a_stop_right_after_the_last_client_gave_up_lets_its_wave_retire() -> None:
    """What the machine found first: one request, its client gone 2 ms after sending it, then the
    loop stopped - its wave was still crossing the stages, the stage tasks were cancelled under it,
    and the drain check said "1 waves in flight after the run drained". Now the loop lets the waves
    in flight retire before it stops (``RunState.all_retired``)."""
    async def main() -> None:
        served = await Served.start()
        req = request(0, 200)
        answer = asyncio.ensure_future(served.answer(req))
        await asyncio.sleep(0.001953125)
        await served.source.cancel(req.id)
        await answer
        await served.stop()                 # check_invariants: the drain check runs, and passes
        assert served.loop.run_state.in_flight == 0
    run_virtual(main())
