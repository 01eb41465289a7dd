"""The open-loop request source of a server: requests arrive when clients send them.

``wavepp serve`` runs the one pipeline loop (:class:`runtime.loop.PipelineLoop`) with this source in
place of a workload. The loop hands the source an :class:`runtime.arrivals.ArrivalPort` - its
arrival path, the run state and where requests end - and nothing else of itself. A client's request becomes a
:class:`Request` handed to the arrival path (hint lookup, lease, escrow, waves: nothing
server-specific past this module); its outcome comes back through ``RequestEnds.on_outcome`` and
resolves the client's future.

Backpressure is the caller's check/act pair: :meth:`ServerSource.can_accept` (the admission queue
has room) before :meth:`ServerSource.submit`. :meth:`ServerSource.cancel` withdraws one request
wherever it is: still waiting (dropped from the queue), inside an admission round (withdrawn as
soon as the round ends), or admitted (its lease and escrow released on every stage; chunks of it
still in flight are skipped as stale by every stage).
"""

from __future__ import annotations

import asyncio
from array import array
from dataclasses import dataclass

from wavepp.runtime.arrivals import ArrivalPort
from wavepp.runtime.request import Completion, Request

FOREVER = 10**12            # a server's loop runs until it is stopped
CANCELLED = "cancelled by the client"


class QueueFull(Exception):
    """The admission queue is full: the client should retry later (HTTP 429)."""


@dataclass(frozen=True, slots=True)
class Outcome:
    """What a request ended with: a completion, or the one-line reason it failed."""

    completion: Completion | None
    error: str | None


class ServerSource:
    """Requests from clients, at most ``max_queue`` of them waiting for admission at once."""

    open_loop = True
    held_by_cap = 0             # no cap delays a client's request: past the queue it is refused (429)
    exhausted = False
    num_requests = FOREVER

    def __init__(self, max_queue: int) -> None:
        if max_queue < 1:
            raise ValueError(f"the admission queue must hold at least 1 request, got {max_queue}")
        self.max_queue = max_queue
        self.loop: ArrivalPort | None = None
        self._futures: dict[str, asyncio.Future[Outcome]] = {}
        self._cancel: dict[str, str] = {}          # request id -> reason, until it is withdrawn
        self.num_cancelled = 0

    def primed_prompts(self) -> list[tuple[array[int], list[int]]]:
        return []                                   # nothing is seen before the first client asks

    def working_set_tokens(self) -> int:
        return 0                                    # clients' prompts: not known as shared prefixes

    def next_request(self, now: float) -> Request:
        raise RuntimeError("a server's requests come from its clients")

    # ---- the loop's side ------------------------------------------------------------------------
    async def arrivals(self, loop: ArrivalPort) -> None:
        """A task of the loop: attach, then withdraw cancelled requests once their admission round ends."""
        self.loop = loop
        loop.ends.on_outcome = self._done
        while True:
            await loop.run.changed.wait()
            for rid in list(self._cancel):
                await self._withdraw(rid)

    def ended(self, loop: ArrivalPort) -> None:
        loop.run.changed.notify()          # open loop: nothing to bring; wake whoever waits for room

    def _done(self, request_id: str, outcome: Completion | str) -> None:
        self._cancel.pop(request_id, None)
        if self.loop is not None:                   # a server keeps no per-request record past the answer
            self.loop.failures.pop(request_id, None)
        future = self._futures.pop(request_id, None)
        if future is None or future.done():
            return
        if isinstance(outcome, Completion):
            future.set_result(Outcome(outcome, None))
        else:
            future.set_result(Outcome(None, outcome))

    # ---- the clients' side ----------------------------------------------------------------------
    @property
    def ready(self) -> bool:
        return self.loop is not None

    @property
    def queued(self) -> int:
        """Requests accepted and not yet admitted (waiting, or inside an admission round)."""
        loop = self.loop
        return 0 if loop is None else loop.run.num_waiting + loop.run.admitting

    @property
    def outstanding(self) -> int:
        """Requests accepted and not yet answered."""
        return len(self._futures)

    def can_accept(self) -> bool:
        return self.ready and self.queued < self.max_queue

    def submit(self, request: Request) -> asyncio.Future[Outcome]:
        """Hand ``request`` to the loop; its future resolves when it completes or fails."""
        if self.loop is None:
            raise RuntimeError("the pipeline loop is not running")
        if not self.can_accept():
            raise QueueFull(f"the admission queue is full ({self.queued} requests waiting, at most {self.max_queue})")
        if request.id in self._futures:
            raise ValueError(f"request id {request.id!r} is already in flight")
        future: asyncio.Future[Outcome] = asyncio.get_running_loop().create_future()
        self._futures[request.id] = future
        self.loop.arrive(request)         # the loop's own arrival path: span, limits, the waiting line
        return future

    async def cancel(self, request_id: str, reason: str = CANCELLED) -> bool:
        """Withdraw a request (its client went away); False when it was no longer in flight. A
        request already completing is not withdrawn: it ends with its completion, whoever listens."""
        if request_id not in self._futures:
            return False
        self._cancel[request_id] = reason
        await self._withdraw(request_id)
        return True

    async def cancel_all(self, reason: str) -> None:
        for rid in list(self._futures):
            await self.cancel(rid, reason)

    def fail_all(self, reason: str) -> None:
        """The loop stopped: every request still in flight is answered with ``reason``."""
        self.loop = None
        for rid in list(self._futures):
            self._done(rid, reason)

    async def _withdraw(self, rid: str) -> None:
        loop = self.loop
        if loop is None or rid not in self._cancel:
            return
        waiting = loop.run.withdraw(rid)
        if waiting is not None:                      # holds nothing on any stage
            self.num_cancelled += 1
            loop.ends.fail_unadmitted(waiting, self._cancel.pop(rid))
            return
        admitted = loop.run.cancellable(rid)
        if admitted is not None:    # admitted: its lease and escrow released on every stage
            reason = self._cancel.pop(rid)
            if await loop.ends.fail(admitted, reason):
                self.num_cancelled += 1
        # else: inside an admission round right now (withdrawn on the next wake-up after it), or
        # completing (its completion answers it, and _done forgets the cancellation)
