"""Completion, failure and fallback: the end of a request's path.

Completion attaches the request's blocks on every stage (publishing them to the hint index),
drops its lease and registry entry, returns the first token and brings the next arrival. A
failure releases everything the request holds; a late fallback (baselines) lowers its reuse
boundary and sends it back to admission.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from wavepp.runtime.clock import now
from wavepp.runtime.control.plane import LeaseRegistry
from wavepp.runtime.engines.base import StageExecutor
from wavepp.runtime.figures.prefix_ledger import split_reuse
from wavepp.runtime.kvcache.handle import StageHandle
from wavepp.runtime.policies import get_policy
from wavepp.runtime.request import AdmittedRequest, Chunk, Completion, Request, RequestState, Wave
from wavepp.runtime.run_state import RunState
from wavepp.store.records import StatusSnapshot
from wavepp.telemetry import names as N
from wavepp.telemetry.setup import Telemetry

if TYPE_CHECKING:
    from wavepp.runtime.policies.base import Policy

# The most recent completions, block tables included (~17 KB each at 16K tokens on 4 stages), kept for
# inspection; whoever needs every one takes it as it ends (``RequestEnds.on_outcome``: the server does), so a
# long run's memory does not grow with the requests it finished.
COMPLETIONS_KEPT = 1024
STATUS_HISTORY = 20_000


@dataclass(slots=True, repr=False)
class LoopResult:
    completions: deque[Completion] = field(default_factory=lambda: deque(maxlen=COMPLETIONS_KEPT))
    failures: dict[str, str] = field(default_factory=dict)     # request id -> one-line error (a server drops
    num_failed: int = 0                                        # each once answered; this counts them all)
    knob_changes: list[tuple[int, dict[str, Any]]] = field(default_factory=list)   # (span-clock ns, changes)
    status: deque[StatusSnapshot] = field(default_factory=lambda: deque(maxlen=STATUS_HISTORY))

    def __repr__(self) -> str:
        """Counts, not contents. asyncio.Runner formats the run's finished main task - this, its result -
        twice as it returns (``signal.getsignal`` of its SIGINT handler builds a ValueError message with the
        task's repr), and a field-by-field repr of 1,024 completions with their block tables and the status
        snapshots took 0.13 s each time at the end of a 3,993-request Mooncake replay."""
        return (f"LoopResult({len(self.completions)} completions kept, {self.num_failed} failed, "
                f"{len(self.knob_changes)} knob changes, {len(self.status)} status snapshots)")


class RequestEnds:
    """Where requests leave the pipeline: retired waves, completions, failures and fallbacks.

    ``spans`` holds each request's open span (opened at arrival); ``policy`` answers the policy in
    force (its return path); ``on_end`` runs once per request that finished or failed (the
    closed loop's next arrival); ``on_computed`` remembers a finished request's block hashes;
    ``on_retired`` runs once per retired wave (the plan leaves the store)."""

    def __init__(self, run: RunState, handles: Sequence[StageHandle], executor: StageExecutor,
                 tel: Telemetry, spans: dict[str, Any], registry: LeaseRegistry, result: LoopResult,
                 policy: Callable[[], Policy], on_end: Callable[[], None],
                 on_computed: Callable[[Sequence[int]], None], on_retired: Callable[[Wave], None]) -> None:
        self.run = run
        self.handles = list(handles)
        self.executor = executor
        self.tel = tel
        self.spans = spans
        self.registry = registry
        self.result = result
        self.policy = policy
        self.on_end = on_end
        self.on_computed = on_computed
        self.on_retired = on_retired
        # An open-loop source's hook: each request's completion, or its one-line error, as it ends.
        self.on_outcome: Callable[[str, Completion | str], None] | None = None
        # Warm-up requests (the loop's warm_up): each one's end resolves its future and counts in no
        # result, no progress and no closed loop.
        self.warming: dict[str, asyncio.Future[Completion | str]] = {}
        # ``--check-invariants``: awaited after every retired wave (runtime.guards.invariants.check_running).
        self.after_retire: Callable[[], Awaitable[None]] | None = None

    async def retire(self, wave: Wave, live: list[Chunk]) -> None:
        """The last stage ran ``wave`` (its ``live`` chunks): finish the requests it completes,
        then free its ring slot (after the sample state's trip back, where the policy has one)."""
        done = self.run.computed(live)
        await self.policy().return_path.after_last_stage(self.handles[-1])
        await self._store(live)
        if done:
            await self.complete(done, wave)
        self.run.retired(wave)
        self.on_retired(wave)
        if wave.span is not None:
            self.tel.end(wave.span)
        if self.after_retire is not None:
            await self.after_retire()

    async def _store(self, live: list[Chunk]) -> None:
        """Where a running request's policy publishes on retire, its chunks' full blocks become reusable on
        every stage now (mechanisms.block_publication); its last chunk's wait for completion."""
        items = [(c.request_id, a.request.block_hashes, (c.start + c.length) // a.block_size)
                 for c in live if not c.is_last and (a := self.run.live(c)) is not None
                 and get_policy(a.policy).publish.on_retire]
        if items:
            await asyncio.gather(*(h.store_many(items) for h in self.handles))
            self.run.index_dirty.notify()

    async def complete(self, done: list[AdmittedRequest], wave: Wave) -> None:
        """The requests whose last chunk left the last stage in ``wave``: one message per stage,
        each a stage-completion span under the wave's."""
        items = [(a.request.id, a.request.block_hashes) for a in done]

        async def on_stage(h: StageHandle) -> list[list[int]]:
            with self.tel.span(N.COMPLETE, {N.STAGE: h.stage, N.WAVE_ID: wave.id, N.NUM_REQUESTS: len(items)},
                               parent=wave.span):
                return await h.complete_many(items)
        per_stage = await asyncio.gather(*(on_stage(h) for h in self.handles))
        for i, a in enumerate(done):
            self._finish(a, tuple(tuple(tables[i]) for tables in per_stage))
        self.run.capacity.notify()
        self.run.index_dirty.notify()

    def _finish(self, a: AdmittedRequest, tables: tuple[tuple[int, ...], ...]) -> None:
        req = a.request
        for f in self.run.followers(a):       # what they read is computed on every stage now
            f.follows = None
        self.run.drop(a)
        self.registry.released(req.id)
        req.state = RequestState.DONE
        self.on_computed(req.block_hashes)
        span = self.spans.pop(req.id)
        in_flight = split_reuse(a.reuse_blocks, req.reusable_blocks)[1] * a.block_size
        span.set_attributes({N.REUSED_TOKENS: a.reused_tokens, N.REUSE_BLOCKS: a.reuse_blocks,
                             N.SHARED_IN_FLIGHT_TOKENS: in_flight,
                             N.COMPUTED_TOKENS: req.num_tokens - a.reused_tokens, N.FALLBACKS: req.fallbacks,
                             N.OUTCOME: "completed"})
        self.tel.end(span)
        completion = Completion(req.id, self.executor.first_token(req.id), tables, a.reused_tokens,
                                now() - req.arrival)
        self.executor.forget(req.id)
        if self._warmed_up(req.id, completion):
            return
        self.result.completions.append(completion)
        if self.on_outcome is not None:
            self.on_outcome(req.id, completion)
        self._ended()

    def _warmed_up(self, rid: str, outcome: Completion | str) -> bool:
        future = self.warming.pop(rid, None)
        if future is None:
            return False
        future.set_result(outcome)
        return True

    def _ended(self) -> None:
        self.run.ended()
        self.on_end()

    async def release_everywhere(self, rid: str) -> None:
        await asyncio.gather(*(h.release([rid]) for h in self.handles))
        self.registry.released(rid)
        self.run.capacity.notify()
        self.run.index_dirty.notify()

    async def fail(self, a: AdmittedRequest, error: str) -> bool:
        """End admitted request ``a`` with ``error``, releasing it on every stage. Nothing happens
        (False) when it ended or fell back meanwhile, or is completing: each request ends once, and
        a stage, a client and the loop may all try to end it at the same moment."""
        if not self.run.may_end(a):
            return False
        self.run.drop(a)
        await self._send_back_followers(a)
        await self.release_everywhere(a.id)
        self.fail_unadmitted(a.request, error)
        self.run.changed.notify()
        return True

    async def _send_back_followers(self, a: AdmittedRequest) -> None:
        """``a`` ends without completing: a follower would read blocks it may never compute, so each goes
        back to admission (its own followers with it), letting go of them before ``a`` does. One whose last
        chunk left the last stage read only chunks that ran everywhere: it completes."""
        for f in self.run.followers(a):
            if self.run.may_end(f):
                self.tel.event(self.spans[f.id], N.EVENT_PRODUCER_ENDED, {N.PRODUCER: a.id})
                await self._start_over(f)
            else:
                f.follows = None

    def fail_unadmitted(self, req: Request, error: str) -> None:
        """End a request that holds nothing on any stage with ``error``."""
        req.state = RequestState.FAILED
        self.executor.forget(req.id)
        span = self.spans.pop(req.id)
        self.tel.event(span, N.EVENT_FAILED, {N.ERROR: error})
        span.set_attributes({N.FALLBACKS: req.fallbacks, N.OUTCOME: "failed"})
        self.tel.end(span, error=error)
        if self._warmed_up(req.id, error):
            return
        self.result.failures[req.id] = error
        self.result.num_failed += 1
        if self.on_outcome is not None:
            self.on_outcome(req.id, error)
        self._ended()

    async def late_fallback(self, a: AdmittedRequest, granted: int, stage: int) -> None:
        """A stage lacked part of the planned prefix: lower the boundary and start the request over
        (nothing, when it ended meanwhile)."""
        if not self.run.may_end(a):
            return
        req = a.request
        req.fallbacks += 1
        req.max_reuse_blocks = granted
        self.tel.event(self.spans[req.id], N.EVENT_FALLBACK, {
            N.STAGE: stage, N.FROM_BLOCKS: a.reuse_blocks, N.REUSE_BLOCKS: granted,
            N.FROM_TOKENS: a.reused_tokens, N.TO_TOKENS: granted * a.block_size})
        await self._start_over(a)

    async def readmit(self, a: AdmittedRequest, stage: int, reason: str) -> None:
        """Send ``a`` back to admission with its boundary kept (nothing, when it ended meanwhile)."""
        if not self.run.may_end(a):
            return
        self.tel.event(self.spans[a.id], N.EVENT_READMITTED, {N.STAGE: stage, N.ERROR: reason})
        await self._start_over(a)

    async def _start_over(self, a: AdmittedRequest) -> None:
        self.run.drop(a)
        a.request.state = RequestState.WAITING
        await self._send_back_followers(a)
        await self.release_everywhere(a.id)
        self.run.requeue(a.request)
