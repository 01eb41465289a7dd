"""Wave planning: how many tokens the next wave gets (MPU budget) and which chunks fill it.

MPU (maximum pipeline utilization, DESIGN §2)::

    candidates  b_0 = M,  b_{j+1} = max(b_min, alignDown_B(b_j / 2))
    waves available at budget b:   n(b) = max(W / b, N_{>b/2})
    target ready waves:            S = R + (F - 1) * P
    choose the largest b with n(b) >= S, else b_min

W is the admitted-but-unscheduled tokens, N_{>b/2} the admitted requests with more than b/2
tokens left. Hysteresis: a larger proposal wins after R/2 consecutive larger proposals, a
smaller one after P consecutive smaller ones (the first decision is taken as proposed).

Packing is first-come-first-served, and never fills a small leftover of a wave with a fragment:
a chunk that does not finish its request is at least ``max(b_min, b/2)`` tokens.

Time-equalized packing lives in :mod:`runtime.planning.timed`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from wavepp.runtime.request import AdmittedRequest, Chunk, Request

Position = Callable[[AdmittedRequest], int]    # where the budget charges a request's next chunk from
Waiting = Callable[[], Sequence[Request]]       # the requests waiting for admission, head first


def nothing_waiting() -> Sequence[Request]:
    return ()


def align_down(x: int, unit: int) -> int:
    return (x // unit) * unit


def scheduled(a: AdmittedRequest) -> int:
    """Charge from the first unscheduled token: only what is computed costs budget."""
    return a.scheduled


@dataclass(frozen=True, slots=True)
class Room:
    """Tokens of the next wave left for requests not admitted yet. A chunking scheduler lets a request join
    while any is left, its first chunk cut to it; one without chunked prefill (``whole``) takes a request
    only when its whole first charge fits, and the first that does not closes the batch - no later,
    smaller request jumps it."""
    tokens: int
    whole: bool = False


@dataclass(frozen=True, slots=True)
class WavePlan:
    chunks: list[Chunk]
    budget: int
    ready_waves: float           # n(b) at the chosen budget (for the wave-plan span)


def budget_candidates(max_tokens: int, min_tokens: int, block_size: int) -> list[int]:
    out = [max_tokens]
    while out[-1] > min_tokens:
        out.append(max(min_tokens, align_down(out[-1] // 2, block_size)))
    return out


class MpuBudget:
    """MPU wave budget with hysteresis."""

    def __init__(self, max_tokens: int, min_tokens: int, block_size: int,
                 ring: int, fill_factor: int, num_stages: int, hysteresis: bool = True) -> None:
        self.candidates = budget_candidates(max_tokens, min_tokens, block_size)
        self.min_tokens = min_tokens
        self.target = ring + (fill_factor - 1) * num_stages          # S
        self.raise_after = max(1, ring // 2)
        self.lower_after = max(1, num_stages)
        self.hysteresis = hysteresis
        self.current: int | None = None
        self._up = self._down = 0

    def waves_available(self, budget: int, remaining: Sequence[float]) -> float:
        """n(b) = max(W / b, N_{>b/2})."""
        w = sum(remaining)
        big = sum(1 for r in remaining if r > budget / 2)
        return max(w / budget, big)

    def propose(self, remaining: Sequence[float]) -> int:
        for b in self.candidates:
            if self.waves_available(b, remaining) >= self.target:
                return b
        return self.min_tokens

    def decide(self, remaining: Sequence[float]) -> int:
        """The budget for the next wave, given each admitted request's unscheduled tokens."""
        return self.settle(self.propose(remaining))

    def settle(self, proposal: int) -> int:
        """The budget in force after ``proposal`` (hysteresis)."""
        if self.current is None or not self.hysteresis:
            self.current = proposal
        elif proposal > self.current:
            self._up, self._down = self._up + 1, 0
            if self._up >= self.raise_after:
                self.current, self._up = proposal, 0
        elif proposal < self.current:
            self._down, self._up = self._down + 1, 0
            if self._down >= self.lower_after:
                self.current, self._down = proposal, 0
        else:
            self._up = self._down = 0
        return self.current


def pack_fcfs(admitted: Sequence[AdmittedRequest], budget: int, min_fragment: int,
              block_size: int, position: Position = scheduled) -> list[Chunk]:
    """Fill one wave first-come-first-served.

    A request is charged from ``position(a)`` (``<= a.scheduled``; see
    :mod:`runtime.mechanisms.token_charge`) to its end; its whole remainder is taken when that
    fits. Otherwise a block-aligned cut is made only when it is at least ``min_fragment``
    tokens; a smaller leftover stays empty. The chunk computes from ``a.scheduled``: as many
    tokens as were charged, or fewer when the request ends first - so a budget charged from
    position 0 can be spent on a short suffix::

        prompt   |==== cached prefix ====|== suffix ==|
        charged  |<-------- min(space, prompt) ------->|      (position 0)
        computed                         |<- suffix ->|
    """
    return _pack(admitted, budget, min_fragment, block_size, position)[0]


def _pack(admitted: Sequence[AdmittedRequest], budget: int, min_fragment: int, block_size: int,
          position: Position) -> tuple[list[Chunk], int]:
    """:func:`pack_fcfs`, and the budget it leaves uncharged."""
    chunks: list[Chunk] = []
    space = budget
    for a in admitted:
        if space <= 0:
            break
        left = a.remaining
        if left <= 0:
            continue
        pos = position(a)
        charged = a.request.num_tokens - pos
        if charged <= space:
            pass
        elif space >= min_fragment:
            charged = align_down(pos + space, block_size) - pos
            if charged <= 0 or charged < min_fragment:
                break
        else:
            break
        take = min(left, charged)
        chunks.append(Chunk(a.id, a.scheduled, take, a.reuse_blocks, a.scheduled + take == a.request.num_tokens,
                            a.attempt, a.request.tokens))
        space -= charged
    return chunks, space


def pack_static(admitted: Sequence[AdmittedRequest], budget: int, block_size: int,
                position: Position = scheduled) -> list[Chunk]:
    """TensorRT-LLM's FCFS context chunking (``_chunk_fcfs``): each request in order gets
    ``min(remaining, capacity)``, a truncated chunk rounded down to the block unit - FCFS packing
    where any leftover may take a fragment."""
    return pack_fcfs(admitted, budget, 1, block_size, position)


def static_room(admitted: Sequence[AdmittedRequest], budget: int, block_size: int,
                position: Position = scheduled) -> Room:
    """The budget :func:`pack_static` leaves uncharged after ``admitted``: what a scheduler that
    looks a waiting request up only when it joins a batch still has for new requests."""
    return Room(max(0, _pack(admitted, budget, 1, block_size, position)[1]))


class Planner:
    """Plans the next wave from the admitted requests, in admission order."""

    def plan(self, admitted: Sequence[AdmittedRequest]) -> WavePlan | None:
        raise NotImplementedError

    def room(self, admitted: Sequence[AdmittedRequest]) -> Room | None:
        """What the next wave would leave for requests not admitted yet, without planning it
        (no state changes); None where the budget adapts to the admitted work (MPU, cost)."""
        return None

    def refusal(self, num_tokens: int) -> str | None:
        """Why a prompt of ``num_tokens`` can never be scheduled by this planner (None: it can)."""
        return None


class MpuPlanner(Planner):
    """MPU budget + FCFS packing without small fragments (WavePP)."""

    def __init__(self, budget: MpuBudget, min_tokens: int, block_size: int, position: Position = scheduled) -> None:
        self.budget = budget
        self.min_tokens = min_tokens
        self.block_size = block_size
        self.position = position

    def plan(self, admitted: Sequence[AdmittedRequest]) -> WavePlan | None:
        remaining = [a.remaining for a in admitted if a.remaining > 0]
        if not remaining:
            return None
        b = self.budget.decide(remaining)
        chunks = pack_fcfs(admitted, b, max(self.min_tokens, b // 2), self.block_size, self.position)
        return WavePlan(chunks, b, self.budget.waves_available(b, remaining)) if chunks else None


class StaticPlanner(Planner):
    """A fixed token budget per wave (TensorRT-LLM's ``max_num_tokens``) packed by :func:`pack_static`."""

    whole = False              # True: a request's uncached suffix is never cut (no chunked prefill)

    def __init__(self, tokens: int, block_size: int, position: Position = scheduled) -> None:
        self.tokens = tokens
        self.block_size = block_size
        self.position = position

    def plan(self, admitted: Sequence[AdmittedRequest]) -> WavePlan | None:
        remaining = [a.remaining for a in admitted if a.remaining > 0]
        if not remaining:
            return None
        chunks = _pack(admitted, self.tokens, self._min_fragment(), self.block_size, self.position)[0]
        return WavePlan(chunks, self.tokens, sum(remaining) / self.tokens) if chunks else None

    def room(self, admitted: Sequence[AdmittedRequest]) -> Room | None:
        left = _pack(admitted, self.tokens, self._min_fragment(), self.block_size, self.position)[1]
        return Room(max(0, left), whole=self.whole)

    def _min_fragment(self) -> int:
        return self.tokens + 1 if self.whole else 1     # whole: no cut fits, the first misfit closes the wave


class WholePlanner(StaticPlanner):
    """A fixed budget per wave without chunked prefill (TensorRT-LLM's default, C++
    ``MicroBatchScheduler`` without a chunk config): FCFS, each request scheduled with its whole uncached
    suffix, charged as the policy's token charge says; the batch closes at the first request that does not
    fit what is left. A prompt longer than the budget is refused: TensorRT-LLM's ``_check_arguments``
    (``llmapi/llm.py``) rejects it at the API whatever its cached prefix."""

    whole = True

    def refusal(self, num_tokens: int) -> str | None:
        if num_tokens <= self.tokens:
            return None
        return (f"prompt of {num_tokens} tokens is longer than the batch's {self.tokens} tokens "
                "(max_num_tokens without chunked prefill)")
