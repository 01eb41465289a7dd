"""Admission rounds: hint -> lease -> escrow (DESIGN §2).

One round admits a batch of waiting requests with one message per stage per step:

1. **hint**: the reuse boundary ``k`` per request, from the policy's reuse lookup (the minimum
   over stages of the longest resident prefix in the shared hint index, or stage 0's own tree);
2. **lease**: every admitting stage pins ``[0, k)`` and answers the boundary it could give; the
   leader lowers ``k`` to the minimum and the stages unpin the excess (``k`` only goes down);
3. **escrow**: every admitting stage reserves room for the suffix. Requests are taken in order;
   the first one a stage cannot fit, and all after it, wait for the next round (backpressure).

The result is :class:`AdmittedRequest` objects. :class:`AdmissionQueue` feeds rounds from the
run's waiting line; whether rounds run beside the pipeline loop or inside it is the policy's
admission drive (:mod:`runtime.mechanisms.admission_drive`), not this module's.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Container, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from wavepp.runtime.clock import now
from wavepp.runtime.control.knobs import Knobs
from wavepp.runtime.control.plane import LeaseRegistry
from wavepp.runtime.kvcache.handle import LeaseItem, StageHandle, on_stages
from wavepp.runtime.mechanisms.reserve import Reserve, SuffixBlocks
from wavepp.runtime.mechanisms.reuse_lookup import ReuseLookup
from wavepp.runtime.mechanisms.sharing import ComputeAgain, Follow, ShareDecision, Sharing, Wait
from wavepp.runtime.mechanisms.token_charge import SuffixOnly, TokenCharge
from wavepp.runtime.planning.planner import Room
from wavepp.runtime.request import AdmittedRequest, Request, RequestState
from wavepp.runtime.run_state import RunState
from wavepp.store.base import Store
from wavepp.telemetry import names as N
from wavepp.telemetry.setup import Telemetry


@dataclass(frozen=True, slots=True)
class RoundResult:
    admitted: list[AdmittedRequest]
    deferred: list[Request]          # did not fit (escrow backpressure) or wait for a producer; retried next
                                     # round, in order
    unscheduled: list[Request] = dataclasses.field(default_factory=list)  # past the next wave's room:
                                     # not looked up yet (mechanisms.lookup_moment), back in line after deferred


class Admission:
    """Runs admission rounds against the stages in ``admit_stages``, finding boundaries with
    ``lookup`` (:mod:`runtime.mechanisms.reuse_lookup`) and escrowing what ``reserve`` says."""

    def __init__(self, stages: Sequence[StageHandle], admit_stages: Sequence[int], store: Store,
                 block_size: int, telemetry: Telemetry, lookup: ReuseLookup,
                 reserve: Reserve | None = None, policy: str = "wavepp", share: Sharing | None = None,
                 charge: TokenCharge | None = None) -> None:
        """``policy``: the name of the policy these rounds admit under (each admitted request keeps it);
        ``share``: what a request whose next block another request is computing does (``mechanisms.sharing``);
        ``charge``: what a new request costs of a wave's room (``mechanisms.token_charge``)."""
        self.stages = list(stages)
        self.admit_stages = list(admit_stages)
        self.store = store
        self.block_size = block_size
        self.tel = telemetry
        self.lookup = lookup
        self.reserve = reserve or SuffixBlocks()
        self.policy = policy
        self.share = share or ComputeAgain()
        self.charge = charge or SuffixOnly()
        self._admitting = [self.stages[s] for s in self.admit_stages]
        # A hybrid model resumes only at its stages' state snapshots - where a prompt ended, or at the
        # interval's multiples: a lease lowered to the multiple below the lookup's boundary is the interval's
        # cost, not a miss; lower than that is a fallback.
        self.resume_step = max((h.resume_step for h in self.stages), default=1)

    def _max_blocks(self, r: Request) -> int:
        # At least one token is always computed: the first token needs the last position's logits.
        cap = (r.num_tokens - 1) // self.block_size
        return cap if r.max_reuse_blocks is None else min(cap, r.max_reuse_blocks)

    async def round(self, requests: Sequence[Request], critical_path: bool = False,
                    computing: Container[int] = (), room: Room | None = None,
                    producers: Mapping[int, AdmittedRequest] | None = None,
                    settles: Callable[[], int] = lambda: 0) -> RoundResult:
        """``critical_path``: the loop waits for this round (the span says so; see the idle causes);
        ``computing``: block hashes admitted requests are computing now, ``producers`` which one computes
        each (``mechanisms.sharing``); ``room``: tokens of the next wave open to new requests (None: no
        limit) - the requests past it stay unscheduled, in order; ``settles``: how many index flushes
        have taken ended requests' blocks out of ``computing`` so far."""
        attributes = {N.NUM_REQUESTS: len(requests), N.ADMISSION_CRITICAL: critical_path}
        with self.tel.span(N.ADMISSION_ROUND, attributes, cpu=True) as round_span:
            limits = [self._max_blocks(r) for r in requests]
            # A flush that settles while the hint is read takes blocks out of ``computing`` that the hint
            # may not show yet: judged together, a request waiting for them would go ahead from below them
            # and compute them again. Such a hint is read again.
            while True:
                seen = settles()
                hints = await self._hint(requests, limits)
                if settles() == seen:
                    break
            decisions = self.share.decide(requests, hints, limits, computing, producers or {}, self.resume_step == 1)
            scheduled = self._within(room, requests, hints, decisions)
            chosen = [(r, k, d) for r, k, d in zip(requests[:scheduled], hints, decisions, strict=False)
                      if not isinstance(d, Wait)]
            admitted: list[AdmittedRequest] = []
            if chosen:
                granted = await self._lease(chosen)
                admitted, _ = await self._escrow(chosen, granted)
            if len(chosen) < scheduled:
                round_span.set_attribute(N.WAITING_FOR_PRODUCER, scheduled - len(chosen))
            round_span.set_attribute(N.NUM_ADMITTED, len(admitted))
        taken = {a.id for a in admitted}
        return RoundResult(admitted, [r for r in requests[:scheduled] if r.id not in taken], list(requests[scheduled:]))

    def _within(self, room: Room | None, requests: Sequence[Request], hints: Sequence[int],
                decisions: Sequence[ShareDecision]) -> int:
        """How many of ``requests`` (a prefix) join the next wave: all without a room; else while some of
        the room is left, each taking what its first chunk is charged (a request that waits takes none); a
        ``whole`` room only while the request's whole charge fits."""
        if room is None:
            return len(requests)
        left = room.tokens
        for i, (r, k, d) in enumerate(zip(requests, hints, decisions, strict=True)):
            if left <= 0:
                return i
            if not isinstance(d, Wait):
                reused = d.to_blocks if isinstance(d, Follow) else k
                charge = self.charge.first_charge(r.num_tokens, reused * self.block_size)
                if room.whole and charge > left:
                    return i
                left -= charge
        return len(requests)

    async def _hint(self, requests: Sequence[Request], limits: Sequence[int]) -> list[int]:
        prompts = [r.block_hashes for r in requests]     # capped below: no copy of long hash lists
        with self.tel.span(N.HINT_LOOKUP, {N.NUM_REQUESTS: len(requests)}) as span:
            boundaries, probes = await self.lookup.boundaries(prompts, limits, self.store, self.stages)
            if probes:
                span.set_attribute(N.PROBES, probes)
            return boundaries

    async def _lease(self, chosen: Sequence[tuple[Request, int, ShareDecision]]) -> list[int]:
        items = [LeaseItem(r.id, r.block_hashes, k, r.num_tokens,
                           (d.producer.id, d.to_blocks) if isinstance(d, Follow) else None) for r, k, d in chosen]
        requests, hints = [r for r, _, _ in chosen], [k for _, k, _ in chosen]
        with self.tel.span(N.LEASE, {N.NUM_REQUESTS: len(requests), N.BLOCKS: sum(hints)}) as span:
            answers = await on_stages(self._admitting, lambda h: h.lease(items))
            final = await self._agree(requests, answers)
            lowered, step = 0, self.resume_step
            for r, hint, k in zip(requests, hints, final, strict=True):
                if k < hint - hint % step:     # the stages could not give what the first lookup promised
                    lowered += 1
                    r.fallbacks += 1
            span.set_attribute(N.FALLBACKS, lowered)
        return final

    async def _agree(self, requests: Sequence[Request], answers: list[list[int]]) -> list[int]:
        """Lower each request's boundary to the minimum of the stages' answers; stages holding more unpin
        the excess. One round, except where a hybrid stage keeps no state snapshot at that minimum and
        answers lower still (``StageCache.shrink_lease``): then again, until every stage agrees."""
        while True:
            final = [min(col) for col in zip(*answers, strict=True)]
            if all(answer == final for answer in answers):     # the stages agree (the usual case)
                return final
            excess = {h.stage: [(i, k) for i, (g, k) in enumerate(zip(answer, final, strict=True)) if g > k]
                      for h, answer in zip(self._admitting, answers, strict=True)}
            shrinking = [h for h in self._admitting if excess[h.stage]]
            if not shrinking:
                return final
            asks = {s: [(requests[i].id, k) for i, k in items] for s, items in excess.items()}
            held = await on_stages(shrinking, lambda h: h.shrink(asks[h.stage]))  # noqa: B023 (awaited here)
            for h, got in zip(shrinking, held, strict=True):
                row = answers[self.admit_stages.index(h.stage)]
                for (i, _), g in zip(excess[h.stage], got, strict=True):
                    row[i] = g

    async def _escrow(self, chosen: Sequence[tuple[Request, int, ShareDecision]],
                      granted: list[int]) -> tuple[list[AdmittedRequest], list[Request]]:
        b, requests = self.block_size, [r for r, _, _ in chosen]
        items = [(r.id, self.reserve.blocks(r.num_tokens, k, b)) for r, k in zip(requests, granted, strict=True)]
        with self.tel.span(N.ESCROW, {N.NUM_REQUESTS: len(requests), N.BLOCKS: sum(n for _, n in items)}):
            fits = await on_stages(self._admitting, lambda h: h.escrow(items, held_prefix=self.reserve.held_prefix))
            n_ok = min(e.fit for e in fits) if fits else len(requests)
            # Requests past the first that did not fit everywhere wait: undo what they hold.
            undo = [r.id for r in requests[n_ok:]]
            if undo:
                await on_stages(self._admitting, lambda h: h.release(undo))
        t = now()
        admitted = []
        for (r, hint, d), k in zip(chosen[:n_ok], granted[:n_ok], strict=True):
            r.state = RequestState.ADMITTED
            r.attempts += 1
            follows = d.producer if isinstance(d, Follow) and k == d.to_blocks else None
            admitted.append(AdmittedRequest(r, k, t, b, attempt=r.attempts, admit_stages=tuple(self.admit_stages),
                                            policy=self.policy, follows=follows, followed_from=hint))
        return admitted, list(requests[n_ok:])


class AdmissionQueue:
    """The line in front of admission: each round takes the head of the run's waiting requests
    (at most ``max_round_requests``, and no more than ``max_leases`` admitted at once), runs it
    and hands the outcome to the run state. ``configure`` swaps the round and the knobs at a wave
    boundary (new knobs, or a new policy)."""

    def __init__(self, run: RunState, admission: Admission, knobs: Knobs, registry: LeaseRegistry,
                 tel: Telemetry, spans: dict[str, Any], room: Callable[[], Room | None] = lambda: None) -> None:
        self.run = run
        self.registry = registry
        self.tel = tel
        self.spans = spans
        self.configure(admission, knobs, room)

    def configure(self, admission: Admission, knobs: Knobs, room: Callable[[], Room | None] = lambda: None) -> None:
        """``room``: tokens the next wave leaves for new requests, asked before each round (None: no limit)."""
        self.admission = admission
        self.knobs = knobs
        self.room = room

    def can_admit(self) -> bool:
        """Requests wait and the lease cap leaves room for some."""
        return self.run.num_waiting > 0 and self.run.num_active < self.knobs.max_leases

    async def admit_once(self, critical_path: bool = False) -> list[AdmittedRequest]:
        """One round over the head of the line; answers what it admitted (empty: nothing fit).
        ``critical_path``: the loop waits for the round (an inline admission drive)."""
        room = self.room()
        if room is not None and room.tokens <= 0:
            return []
        batch = self.run.take(min(self.knobs.max_round_requests, self.knobs.max_leases - self.run.num_active))
        if not batch:
            return []
        self.run.admitting = len(batch)
        started = self.tel.now_ns()
        try:
            result = await self.admission.round(batch, critical_path, self.run.computing, room, self.run.producers,
                                                lambda: self.run.num_settles)
        finally:
            self.run.admitting = 0
        ended = self.tel.now_ns()
        for a in result.admitted:
            span = self.spans[a.id]
            if not span.is_recording():        # an unmeasured request (the warm-up)
                continue
            self.tel.event(span, N.EVENT_ADMITTED, {N.REUSE_BLOCKS: a.reuse_blocks})
            if a.follows is not None:
                span.set_attributes({N.FOLLOWS: a.follows.id,
                                     N.FOLLOWED_TOKENS: (a.reuse_blocks - a.followed_from) * a.block_size})
            span.set_attributes({N.ADMISSION_LATENCY: (ended - span.start_time) / 1e9,
                                 N.ADMISSION_ROUND_S: (ended - started) / 1e9,
                                 N.ADMISSION_DEFERRALS: a.request.deferrals})
        for r in result.deferred:
            r.deferrals += 1
        self.registry.admitted(result.admitted, self.run.num_stages, self.admission.block_size)
        self.run.admitted(result.admitted, [*result.deferred, *result.unscheduled])
        return result.admitted
