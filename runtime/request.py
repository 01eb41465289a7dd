"""The objects a request becomes on its way through the pipeline.

arrival -> ``Request`` -> admission -> ``AdmittedRequest`` -> planner cuts ``Chunk``s into
``Wave``s -> every stage materializes and executes the wave -> completion (``Completion``).

All token positions are in tokens; ``reuse_blocks`` (``k`` in DESIGN.md) is in blocks.
"""

from __future__ import annotations

import enum
from array import array
from dataclasses import dataclass, field
from typing import Any


def cdiv(a: int, b: int) -> int:
    """``ceil(a / b)`` for integers: the blocks that ``a`` tokens fill (``b`` tokens a block)."""
    return -(-a // b)


class RequestState(enum.Enum):
    WAITING = "waiting"        # arrived, not yet admitted
    ADMITTED = "admitted"      # leased + escrowed on every stage, chunks being planned
    DONE = "done"
    FAILED = "failed"


@dataclass(slots=True, eq=False)
class Request:
    """A prompt to prefill. ``block_hashes`` are computed once, at arrival."""

    id: str
    tokens: array[int]                 # array('I') of token ids
    arrival: float               # clock time, seconds
    block_hashes: list[int]      # one per full block
    group: str = ""              # workload's prefix group (for reports only)
    state: RequestState = RequestState.WAITING
    max_reuse_blocks: int | None = None   # after a late fallback: k may never exceed this again
    attempts: int = 0                     # admissions so far (a late fallback re-admits)
    fallbacks: int = 0                    # times the reuse boundary was lowered after the lookup
    deferrals: int = 0                    # admission rounds that deferred it (escrow backpressure)
    reusable_blocks: int = 0              # leading blocks a completed request had computed at its arrival

    @property
    def num_tokens(self) -> int:
        return len(self.tokens)


@dataclass(slots=True, eq=False)
class AdmittedRequest:
    """A request whose prefix is pinned (lease) and whose suffix has room (escrow) on every stage.

    ``scheduled`` advances when the planner puts a chunk in a wave; ``completed`` when the last
    stage finishes it. Both start at the reuse boundary ``reuse_blocks * block_size``.
    """

    request: Request
    reuse_blocks: int
    admitted_at: float
    block_size: int
    scheduled: int = 0
    completed: int = 0
    attempt: int = 0             # which admission of the request this is; stale chunks are skipped
    admit_stages: tuple[int, ...] = ()   # stages that leased + escrowed at admission (others admit locally)
    local_stages: set[int] = field(default_factory=set)   # stages that admitted it locally since (baselines)
    # The policy it was admitted under: its stages keep to that policy's rules (stage admission,
    # reserve) until it ends, whatever the policy knob says meanwhile.
    policy: str = field(default="wavepp", kw_only=True)
    # A follower (runtime.mechanisms.sharing): the admitted request computing blocks [followed_from,
    # reuse_blocks) of its prefix, whose chunks it reads on every stage after they ran there; None once
    # that producer completed.
    follows: AdmittedRequest | None = field(default=None, kw_only=True)
    followed_from: int = field(default=0, kw_only=True)

    def __post_init__(self) -> None:
        self.scheduled = self.completed = self.reuse_blocks * self.block_size

    @property
    def plannable(self) -> bool:
        """Whether its next chunk may join a wave: a follower only once its producer planned every block
        it follows (each stage then runs the producer's chunks first: waves run in order)."""
        return self.follows is None or self.follows.scheduled >= self.reuse_blocks * self.block_size

    @property
    def id(self) -> str:
        return self.request.id

    @property
    def remaining(self) -> int:
        """Tokens not yet put into any wave."""
        return self.request.num_tokens - self.scheduled

    @property
    def reused_tokens(self) -> int:
        return self.reuse_blocks * self.block_size


@dataclass(frozen=True, slots=True)
class Chunk:
    """The descriptor a stage checks before it computes: which tokens of which request, on which prefix."""

    request_id: str
    start: int                   # first token of the chunk; tokens [0, start) are in the KV cache
    length: int
    reuse_blocks: int            # k the leader planned with
    is_last: bool                # the request's final chunk: completion follows
    attempt: int = 0             # admission attempt the chunk belongs to
    # The request's prompt, by reference (stage 0 computes tokens [start, start + length) of it): the wave
    # carries what a stage needs. Not sent past stage 0, and not part of the descriptor a stage checks.
    tokens: array[int] | None = field(default=None, compare=False, repr=False)


@dataclass(slots=True)
class Wave:
    """A micro-batch of chunks moving through stage 0, 1, ..., P-1."""

    id: int
    chunks: list[Chunk]
    budget: int                  # token budget the planner used
    planned_at: float
    broadcast_tokens: int = 0    # baselines: token ids of newly admitted requests relayed with the wave
    span: Any = field(default=None, compare=False, repr=False)   # the wave's span (parent of its stage steps)

    @property
    def num_tokens(self) -> int:
        return sum(c.length for c in self.chunks)


@dataclass(frozen=True, slots=True)
class Completion:
    """What a finished prefill returns: the first token and the handle of its KV blocks per stage."""

    request_id: str
    first_token: int | None      # argmax of the last position's logits (the sim: a prompt token picked by its hash)
    block_ids: tuple[tuple[int, ...], ...]   # per stage, the request's block table
    reused_tokens: int
    prefill_latency: float
