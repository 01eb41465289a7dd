"""The run state: which requests wait, which are admitted, which waves are in flight.

One :class:`RunState` per run. The loop, the stage tasks, completion and the policy's
mechanisms all share it, and only through its methods: each names one transition of a
request's path (arrival -> waiting -> admitted -> scheduled in waves -> retired, or failed, or
back to waiting after a late fallback) or one question asked of it. Nothing else about the run
(its knobs, planner, store, telemetry set-up) is reachable from here.

Three wake-ups let tasks wait for the state to move: ``changed`` (arrivals, admissions,
retirements, requests put back), ``capacity`` (blocks freed on some stage) and ``index_dirty``
(a stage's cache changed: the hint index has something to publish).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter, deque
from collections.abc import Iterable, Sequence

from wavepp.runtime.clock import Wakeup
from wavepp.runtime.request import AdmittedRequest, Chunk, Request, Wave

STOP_RETIRE_S = 10.0      # a loop stopped with no request left: how long its waves in flight get to retire


class RunState:
    def __init__(self, num_stages: int) -> None:
        self.num_stages = num_stages
        self._waiting: deque[Request] = deque()
        self._active: dict[str, AdmittedRequest] = {}
        self._in_flight: dict[int, Wave] = {}           # planned, not yet retired, in plan order
        # Admitted requests whose last chunk left the last stage: their stages are attaching their
        # blocks now. Too late to cancel or fail them - the ending under way is theirs.
        self._completing: set[str] = set()
        self._by_policy: Counter[str] = Counter()        # admitted requests per policy they were admitted under
        # Block hashes admitted requests will compute (past their reuse boundary), with how many will:
        # what a waiting request may wait for instead of computing it again (runtime.mechanisms.sharing).
        self.computing: Counter[int] = Counter()
        self._computes_from: dict[str, int] = {}          # request id -> its first block in ``computing``
        self.producers: dict[int, AdmittedRequest] = {}   # block hash -> the admitted request computing it
        # Ended requests' blocks stay in ``computing`` until the hint index has them (``settled``): a
        # round in between would read a stale hint and compute them again.
        self._settling: deque[tuple[list[int], int]] = deque()
        self.num_settles = 0         # index flushes that settled ended requests' blocks (see ``settled``)
        self.admitting = 0           # requests inside an admission round right now
        self.executing = 0           # stages inside a step right now
        self.num_admitted = 0
        self.num_planned = 0         # waves planned so far (the next wave's id)
        self.num_ended = 0           # requests finished or failed
        self.passed = [0] * num_stages   # waves that finished stage s
        self.wake_on_first_stage = False  # a wave stage 0 finishes notifies ``changed`` (a held wave may be due)
        self.changed = Wakeup()
        self.capacity = Wakeup()
        self.index_dirty = Wakeup()

    # ---- questions ----------------------------------------------------------------------------
    @property
    def num_waiting(self) -> int:
        return len(self._waiting)

    @property
    def num_active(self) -> int:
        return len(self._active)

    @property
    def in_flight(self) -> int:
        return len(self._in_flight)

    @property
    def first_stage_backlog(self) -> int:
        """Planned waves stage 0 has not finished: the one it runs and those queued behind it."""
        return self.num_planned - self.passed[0]

    def head(self) -> Request | None:
        """The request first in line for admission."""
        return self._waiting[0] if self._waiting else None

    def waiting(self) -> Sequence[Request]:
        """The requests waiting for admission, head first (a view: not to be changed)."""
        return self._waiting

    def active(self) -> list[AdmittedRequest]:
        """The admitted requests that may join a wave, in admission order (what the planner schedules from)."""
        return [a for a in self._active.values() if a.plannable]

    def admitted_now(self) -> list[AdmittedRequest]:
        """Every admitted request, plannable or not, in admission order."""
        return list(self._active.values())

    def followers(self, a: AdmittedRequest) -> list[AdmittedRequest]:
        """The admitted requests following ``a`` (reading blocks it computes)."""
        return [f for f in self._active.values() if f.follows is a]

    def get(self, rid: str) -> AdmittedRequest | None:
        return self._active.get(rid)

    def cancellable(self, rid: str) -> AdmittedRequest | None:
        """The admitted request ``rid`` if it may still be ended early (failed, cancelled): admitted
        and not already completing."""
        return None if rid in self._completing else self._active.get(rid)

    def live(self, chunk: Chunk) -> AdmittedRequest | None:
        """The request ``chunk`` belongs to, if that admission of it is still the live one (a chunk
        of a request that failed or fell back meanwhile is stale and is skipped)."""
        a = self._active.get(chunk.request_id)
        return a if a is not None and a.attempt == chunk.attempt else None

    def holds(self, a: AdmittedRequest) -> bool:
        """Whether ``a`` is still admitted (not failed, not sent back by a fallback) since it was."""
        return self._active.get(a.id) is a

    def may_end(self, a: AdmittedRequest) -> bool:
        """Whether ``a`` may still be failed or sent back: held, and not completing."""
        return self.holds(a) and a.id not in self._completing

    def admitted_under_others(self, policy: str) -> bool:
        """Whether some admitted request was admitted under another policy than ``policy`` (the
        ``policy`` knob changed while requests were admitted: their rules differ)."""
        return any(n for name, n in self._by_policy.items() if name != policy)

    def completes_ahead(self, wave_id: int) -> bool:
        """Whether a wave ahead of ``wave_id``, still in flight, finishes a live request - the only
        thing that frees blocks on a stage waiting to prepare ``wave_id`` (waves behind it cannot
        pass it). A stale last chunk finishes nothing: its request was released already (and its
        release woke ``capacity``, as every completion does - so a waiter re-asks then)."""
        return any(c.is_last and self.live(c) is not None
                   for w in self._in_flight.values() if w.id < wave_id for c in w.chunks)

    def unscheduled_tokens(self) -> int:
        return sum(a.remaining for a in self._active.values())

    def pending_first_chunks(self) -> list[list[int]]:
        """Block hashes of the requests whose first chunk is still to come: waiting, or admitted
        with nothing scheduled (a scheduler pass that ignores reuse walks each one's prefix)."""
        pending = [r.block_hashes for r in self._waiting]
        pending += [a.request.block_hashes for a in self._active.values() if a.scheduled == a.reused_tokens]
        return pending

    def prompt_tokens(self, wave: Wave) -> int:
        """Whole-prompt tokens of the live requests ``wave`` carries."""
        in_wave = {c.request_id for c in wave.chunks}
        return sum(a.request.num_tokens for rid, a in self._active.items() if rid in in_wave)

    def has_work(self) -> bool:
        return bool(self._waiting or self._active)

    async def all_retired(self, timeout_s: float = STOP_RETIRE_S) -> None:
        """Until every wave in flight has retired, or ``timeout_s`` passed: a loop stopped with no
        request left lets the waves still crossing its stages (chunks of requests that ended, their
        clients gone) finish, so it stops drained instead of cutting them mid-stage."""
        loop = asyncio.get_running_loop()
        end = loop.time() + timeout_s
        while self._in_flight and loop.time() < end:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.changed.wait(), end - loop.time())

    def progress_mark(self) -> tuple[int, int, int, int]:
        """Changes whenever the run moves: admissions, waves planned, waves through a stage,
        requests finished or failed (the deadlock guard compares two of these)."""
        return self.num_admitted, self.num_planned, sum(self.passed), self.num_ended

    # ---- transitions --------------------------------------------------------------------------
    def arrive(self, req: Request) -> None:
        self._waiting.append(req)
        self.changed.notify()

    def take(self, room: int) -> list[Request]:
        """Up to ``room`` requests from the head of the line, for an admission round."""
        return [self._waiting.popleft() for _ in range(min(room, len(self._waiting)))]

    def admitted(self, admitted: Iterable[AdmittedRequest], deferred: Sequence[Request]) -> None:
        """A round's outcome: ``admitted`` join the active set; ``deferred`` go back to the head
        of the line in their order."""
        n = 0
        for a in admitted:
            self._active[a.id] = a
            self._by_policy[a.policy] += 1
            self._computes_from[a.id] = a.reuse_blocks
            self.computing.update(a.request.block_hashes[a.reuse_blocks:])
            for h in a.request.block_hashes[a.reuse_blocks:]:
                self.producers.setdefault(h, a)
            n += 1
        self.num_admitted += n
        self._waiting.extendleft(reversed(deferred))
        if n:
            self.changed.notify()

    def planned(self, wave: Wave) -> None:
        """``wave`` was planned: its chunks count as scheduled and it is in flight."""
        for c in wave.chunks:
            self._active[c.request_id].scheduled += c.length
        self._in_flight[wave.id] = wave
        self.num_planned = wave.id + 1

    def stage_passed(self, s: int) -> None:
        self.passed[s] += 1
        self.index_dirty.notify()
        if s == 0 and self.wake_on_first_stage:
            self.changed.notify()

    def computed(self, chunks: Iterable[Chunk]) -> list[AdmittedRequest]:
        """The last stage ran ``chunks`` (live ones): their tokens are complete; answers the
        requests whose last chunk this was - from now on they are completing (see ``cancellable``)."""
        done = []
        for c in chunks:
            a = self.live(c)
            if a is None:
                continue        # failed or cancelled while the last stage ran it (released already)
            a.completed += c.length
            if c.is_last:
                done.append(a)
                self._completing.add(a.id)
        return done

    def retired(self, wave: Wave) -> None:
        """``wave`` left the pipeline: its ring slot is free."""
        del self._in_flight[wave.id]
        self.changed.notify()

    def drop(self, a: AdmittedRequest) -> None:
        """Take ``a`` out of the active set (it finished, failed or falls back)."""
        del self._active[a.id]
        self._completing.discard(a.id)
        self._by_policy[a.policy] -= 1
        start = self._computes_from.pop(a.id)
        self._settling.append((a.request.block_hashes, start))
        for h in a.request.block_hashes[start:]:
            if self.producers.get(h) is a:
                del self.producers[h]
        self.index_dirty.notify()

    def settle_mark(self) -> int:
        """Before an index flush: how many ended requests it will cover."""
        return len(self._settling)

    def settled(self, mark: int) -> None:
        """The index flush begun at ``mark`` is done: the requests that had ended by then compute
        nothing any more, and a request waiting for their blocks may try again."""
        computing = self.computing
        for _ in range(mark):
            hashes, start = self._settling.popleft()
            for h in hashes[start:]:
                n = computing[h] - 1
                if n:
                    computing[h] = n
                else:
                    computing.pop(h)        # dict's own (Counter's del is a Python method: ~1 % of a replay)
        if mark:
            self.num_settles += 1
            self.capacity.notify()

    def withdraw(self, rid: str) -> Request | None:
        """Take a waiting request out of the line (its client went away); None when it is not waiting."""
        for req in self._waiting:
            if req.id == rid:
                self._waiting.remove(req)
                self.changed.notify()
                return req
        return None

    def requeue(self, req: Request) -> None:
        """Put a request back at the head of the line (after a late fallback)."""
        self._waiting.appendleft(req)
        self.changed.notify()

    def ended(self) -> None:
        """A request finished or failed."""
        self.num_ended += 1
