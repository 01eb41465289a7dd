"""Every request ends exactly once, whatever races it: a client that gives up at any point of its
request's life, and the ``policy`` knob changed under load, never stop the loop, never fail an
unrelated request and never leave a lease, escrow or reference behind - with
the runtime's invariant checker after every wave and at the drain (``runtime/guards/invariants.py``).

The servers' open-loop source on the shared loop, on the sim engine in virtual time: deterministic
for a seed, hundreds of clients in a couple of seconds.
"""

from __future__ import annotations

import asyncio
import random
from array import array
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from wavepp.runtime.engines.config import SimConfig
from wavepp.runtime.engines.sim.clock import run_virtual
from wavepp.runtime.engines.sim.engine import SimEngine
from wavepp.runtime.kvcache.hashing import block_hashes
from wavepp.runtime.loop import LoopConfig, PipelineLoop
from wavepp.runtime.policies import KINDS, POLICIES
from wavepp.runtime.request import Request
from wavepp.runtime.runs.runfile import RunInfo
from wavepp.runtime.sources.server import CANCELLED, Outcome, ServerSource

BLOCK = 64
# Every registered preset and every single-mechanism ablation of each.
EVERY_POLICY = [*POLICIES.supported_names(),
                *(f"{p}+{kind}={v}" for p in POLICIES.supported_names() for kind, variants in KINDS.items()
                  for v in variants.supported_names())]


def request(i: int, tokens: int, prefix: int = 0) -> Request:
    """Prompts of a few prefix groups (so hits, leases and fallbacks happen) and a distinct tail."""
    ids = array("I", [(prefix * 7919 + t * 13) % 32000 for t in range(tokens // 2)]
                + [(i * 104729 + t * 31) % 32000 for t in range(tokens - tokens // 2)])
    return Request(f"r{i}", ids, asyncio.get_running_loop().time(), block_hashes(ids, BLOCK))


async def until(check: Callable[[], bool], timeout_s: float = 60.0) -> None:
    end = asyncio.get_running_loop().time() + timeout_s
    while not check():
        assert asyncio.get_running_loop().time() < end, "timed out"
        await asyncio.sleep(0.005)


@dataclass
class Served:
    """A loop serving a :class:`ServerSource`, on uneven pools so that stages diverge."""

    engine: SimEngine
    loop: PipelineLoop
    source: ServerSource
    task: asyncio.Task[Any]
    outcomes: dict[str, Outcome] = field(default_factory=dict)

    @classmethod
    async def start(cls, policy: str = "wavepp", capacities: tuple[int, ...] = (3000, 2500, 2000)) -> Served:
        engine = SimEngine(SimConfig("llama-3-8b", "h200", len(capacities), BLOCK, list(capacities)))
        parts = engine.build()
        store = await engine.open_store()
        tel = engine.telemetry(RunInfo.new(policy, "serve", 0, "sim", "memory"))
        knobs = engine.default_knobs().replace(max_wave_tokens=2048, min_wave_tokens=1024, policy=policy)
        source = ServerSource(max_queue=10_000)
        # Every wave boundary and the drain checked (runtime/guards/invariants.py): a violation fails the run.
        loop = PipelineLoop(parts, store, knobs, source, tel, LoopConfig(1, check_invariants=True))
        task = asyncio.create_task(loop.run())
        await until(lambda: source.ready)
        return cls(engine, loop, source, task)

    async def answer(self, req: Request) -> Outcome:
        outcome = await self.source.submit(req)
        self.outcomes[req.id] = outcome
        return outcome

    async def stop(self) -> None:
        """The loop must still run; then it stops and every stage is back to free + cached."""
        assert not self.task.done(), self.task.exception()
        self.loop.done.set()
        await self.task
        for h in self.loop.handles:
            assert h.cache.leases == {} and h.cache.tickets == {} and h.cache.tables == {}, f"stage {h.stage} leaked"
            h.cache.check()                 # no reference left: every block free or cached


async def clients(served: Served, rng: random.Random, n: int, cancel_p: float,
                  during: Callable[[], Awaitable[None]] | None = None) -> int:
    """``n`` clients over two seconds; each gives up with probability ``cancel_p`` after 0.1 ms to 1 s
    (log-uniform: while waiting, inside a round, admitted, mid-chunk, completing). Returns how many
    cancellations were asked for."""
    asked = 0

    async def client(i: int) -> None:
        nonlocal asked
        await asyncio.sleep(rng.random() * 2.0)
        req = request(i, rng.choice([500, 1200, 3000, 7000]), prefix=rng.randrange(4))
        answer = asyncio.ensure_future(served.answer(req))
        if rng.random() < cancel_p:
            await asyncio.sleep(10 ** rng.uniform(-4, 0))
            asked += await served.source.cancel(req.id)
        await answer

    jobs = [asyncio.create_task(client(i)) for i in range(n)]
    if during is not None:
        jobs.append(asyncio.create_task(during()))
    await asyncio.wait_for(asyncio.gather(*jobs), 600)
    return asked


def check_outcomes(served: Served, n: int) -> tuple[int, int]:
    """Every request was answered: completed, or cancelled by its client - nothing else. Returns
    (completed, cancelled)."""
    assert len(served.outcomes) == n
    errors = [o.error for o in served.outcomes.values() if o.completion is None and o.error != CANCELLED]
    assert errors == [], errors[:5]
    completed = sum(o.completion is not None for o in served.outcomes.values())
    return completed, n - completed


def test_a_client_giving_up_while_its_request_completes_ends_it_once_and_the_loop_goes_on() -> None:
    async def main() -> None:
        served = await Served.start(capacities=(2000, 2000))
        last = served.loop.handles[-1]
        complete_many, entered, gate = last.complete_many, asyncio.Event(), asyncio.Event()

        async def held(items: Any) -> Any:            # the last stage attaches the blocks only when let go
            entered.set()
            await gate.wait()
            return await complete_many(items)
        last.complete_many = held  # type: ignore[method-assign]
        answer = asyncio.ensure_future(served.answer(request(0, 1000)))
        await entered.wait()
        await served.source.cancel("r0")            # the client goes away now: too late to withdraw it
        gate.set()
        outcome = await asyncio.wait_for(answer, 10)
        assert outcome.completion is not None and outcome.completion.request_id == "r0"
        assert served.source.num_cancelled == 0     # it was answered, not cancelled
        last.complete_many = complete_many  # type: ignore[method-assign]
        after = await asyncio.wait_for(served.answer(request(1, 1000)), 10)
        assert after.completion is not None          # the loop still serves
        await served.stop()

    run_virtual(main())


def test_hundreds_of_clients_giving_up_at_random_points_leave_nothing_behind() -> None:
    totals = {"asked": 0, "cancelled": 0, "completed": 0}
    for seed in range(6):
        async def main(seed: int = seed) -> None:
            served = await Served.start()
            asked = await clients(served, random.Random(seed), 300, cancel_p=0.5)
            completed, cancelled = check_outcomes(served, 300)
            assert cancelled <= asked and served.source.num_cancelled == cancelled
            totals["asked"] += asked
            totals["cancelled"] += cancelled
            totals["completed"] += completed
            await served.stop()
        run_virtual(main())
    # Not vacuous: most asked cancellations withdrew their request (some came after the answer).
    assert totals["asked"] >= 500 and totals["cancelled"] >= 450 and totals["completed"] >= 900, totals


def test_policy_switches_under_load_across_every_policy_and_ablation_fail_no_request() -> None:
    switches = 0
    for seed in range(3):
        async def main(seed: int = seed) -> None:
            nonlocal switches
            served = await Served.start()
            rng = random.Random(seed)

            async def switch() -> None:
                nonlocal switches
                for i in range(300):
                    await asyncio.sleep(rng.random() * 0.02)
                    policy = EVERY_POLICY[(seed + i) % len(EVERY_POLICY)]
                    served.loop.set_knobs(served.loop.knobs.replace(policy=policy))
                    switches += 1
            await clients(served, rng, 300, cancel_p=0.2, during=switch)
            completed, _ = check_outcomes(served, 300)
            assert completed >= 200
            await served.stop()
        run_virtual(main())
    assert switches == 900


def test_a_request_admitted_under_first_chunk_admission_keeps_its_rules_after_a_switch() -> None:
    async def main() -> None:
        served = await Served.start(policy="wavepp+stage-admission=first-chunk")
        loop, stage1 = served.loop, served.loop.handles[1]
        seen: dict[str, str] = {}
        materialize_many = stage1.materialize_many

        async def recording(items: Any) -> Any:      # the policy in force when stage 1 prepares each chunk
            for item in items:
                seen.setdefault(item.request_id, loop.policy.name)
            return await materialize_many(items)
        stage1.materialize_many = recording  # type: ignore[method-assign]
        first = asyncio.ensure_future(served.answer(request(0, 7000)))      # fills stage 0 for a while
        await until(lambda: loop.run_state.num_active == 1)
        second = asyncio.ensure_future(served.answer(request(1, 1200, prefix=1)))
        await until(lambda: loop.run_state.get("r1") is not None)
        assert loop.run_state.get("r1").admit_stages == (0,)               # stage 1 admits it on its first chunk
        loop.set_knobs(loop.knobs.replace(policy="wavepp"))
        loop.run_state.changed.notify()                                     # a wave boundary: the switch applies
        outcomes = await asyncio.wait_for(asyncio.gather(first, second), 30)
        assert seen["r1"] == "wavepp"                # stage 1 met r1 after the switch ...
        assert all(o.completion is not None for o in outcomes), outcomes   # ... and kept r1's own rules
        await served.stop()

    run_virtual(main())


def test_a_producer_cancelled_mid_document_sends_its_followers_back_and_they_complete() -> None:
    """Two requests follow a third through the half of their prompts they share; its client gives up
    mid-document: they go back to admission before it lets go of the blocks they read, start over and
    complete (the invariants checked at every wave and at the drain: nothing leaked)."""
    async def main() -> None:
        served = await Served.start()
        run = served.loop.run_state
        producer = asyncio.ensure_future(served.answer(request(0, 7000, prefix=1)))
        await until(lambda: run.get("r0") is not None and run.get("r0").scheduled > 0)  # type: ignore[union-attr]
        followers = [asyncio.ensure_future(served.answer(request(i, 7000, prefix=1))) for i in (1, 2)]
        await until(lambda: all(run.get(f"r{i}") is not None for i in (1, 2)))
        assert all(run.get(f"r{i}").follows is run.get("r0") for i in (1, 2))     # type: ignore[union-attr]
        assert await served.source.cancel("r0")
        assert (await producer).error == CANCELLED
        for f in followers:
            outcome = await asyncio.wait_for(f, 60)
            assert outcome.completion is not None, outcome.error
        await served.stop()

    run_virtual(main())
