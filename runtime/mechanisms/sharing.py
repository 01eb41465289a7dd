"""Sharing in flight: what an admission round does with a request whose next uncached block another
admitted request (its producer) is computing right now - many requests on one long document no stage holds.

Without it every such request computes the document again, and under pressure that duplicate work is most of
what the pipeline computes: GLM-5.2 PP4, 13 documents of ~256K tokens at c=32 (the pressure grid's
``docs 256K ws 0.5x``), 33 of 128 requests recomputed a document another request was computing, 9.0M of
13.3M computed tokens. The variants:

* ``follow`` (WavePP): the request follows its producer - its lease reaches through every block the two
  share (``StageCache.lease(follow=...)``), it computes none of them and never waits for the producer's
  completion: its first chunk joins a wave once the producer has planned the last shared block
  (``AdmittedRequest.plannable``), so on every stage the producer's chunks run first. A producer that fails
  or falls back sends its followers back to admission (``RequestEnds``), before they read a block it did
  not compute. Not on a hybrid model (a follower could resume only at a state the producer keeps);
  there it waits, as ``wait`` does.
* ``planned`` (vLLM v1, SGLang): the request reuses the blocks the producer has been scheduled for when it is
  looked up and computes the rest itself - vLLM caches a chunk's blocks when it is scheduled
  (``KVCacheManager.allocate_slots`` -> ``cache_blocks``), SGLang inserts the chunk just scheduled at the
  start of the next round (``cache_unfinished_req``); both match a waiting request when it joins a batch.
* ``wait``: the request stays in line (later requests pass) until the producer completed and its blocks are
  in the hint index (SGLang deprioritises such requests within a batch, ``IN_BATCH_PREFIX_CACHING_*``).
* ``off``: admitted now, it computes the blocks again (TensorRT-LLM: a context's blocks become reusable when
  its micro-batch is handled - ``runtime.mechanisms.block_publication`` - not while it runs).
"""

from __future__ import annotations

from collections.abc import Container, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from wavepp.runtime.registry import Registry
from wavepp.runtime.request import AdmittedRequest, Request


@dataclass(frozen=True, slots=True)
class Go:
    """Lease from the boundary found; compute the rest."""


@dataclass(frozen=True, slots=True)
class Wait:
    """Stay in line this round."""


@dataclass(frozen=True, slots=True)
class Follow:
    """Lease on through ``producer``'s blocks up to block ``to_blocks``."""

    producer: AdmittedRequest
    to_blocks: int


ShareDecision = Go | Wait | Follow
GO, WAIT = Go(), Wait()


class Sharing(Protocol):
    @property
    def name(self) -> str: ...

    def decide(self, requests: Sequence[Request], boundaries: Sequence[int], limits: Sequence[int],
               computing: Container[int], producers: Mapping[int, AdmittedRequest],
               can_follow: bool) -> list[ShareDecision]:
        """Per request of a round (in line order), with its hinted reuse ``boundaries`` (at most its
        ``limits``, in blocks): go, wait, or follow a producer. ``computing``: blocks admitted requests
        compute (or computed, not yet in the hint index); ``producers``: block -> the running request
        computing it; ``can_follow``: whether the stages can lease through a producer's blocks."""
        ...


SHARING = Registry[Sharing]("share", doc="a request whose next block another request is computing")


def shared_blocks(ours: Sequence[int], theirs: Sequence[int], k: int, limit: int) -> int:
    """How many leading blocks two chained hash lists share, given they share block ``k`` (at most ``limit``):
    a chained hash equal at ``i`` is equal before it, so a binary search finds the end."""
    lo, hi = k + 1, min(limit, len(ours), len(theirs))
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if ours[mid - 1] == theirs[mid - 1]:
            lo = mid
        else:
            hi = mid - 1
    return max(lo, k)


def _decide(requests: Sequence[Request], boundaries: Sequence[int], limits: Sequence[int],
            computing: Container[int], producers: Mapping[int, AdmittedRequest], follow: str) -> list[ShareDecision]:
    """``follow``: "all" (the shared blocks), "planned" (those the producer was scheduled for), or "" (wait)."""
    ahead: set[int] = set()              # blocks the requests going ahead in this round will compute
    out: list[ShareDecision] = []
    for r, k, limit in zip(requests, boundaries, limits, strict=True):
        hashes = r.block_hashes
        producer = producers.get(hashes[k]) if k < limit and follow else None
        decision: ShareDecision = GO
        if producer is not None:
            to = shared_blocks(hashes, producer.request.block_hashes, k, limit)
            if follow == "planned":
                to = min(to, producer.scheduled // producer.block_size)
            decision = Follow(producer, to) if to > k else GO
        elif follow != "planned" and k < limit and (hashes[k] in computing or hashes[k] in ahead):
            decision = WAIT
        if decision is GO:
            ahead.update(hashes[k:])
        elif isinstance(decision, Follow):
            ahead.update(hashes[decision.to_blocks:])
        out.append(decision)
    return out


@SHARING.register
@dataclass(frozen=True, slots=True)
class FollowProducer:
    """Follow the producer through every block they share (WavePP; see the module docstring)."""

    name: str = "follow"

    def decide(self, requests: Sequence[Request], boundaries: Sequence[int], limits: Sequence[int],
               computing: Container[int], producers: Mapping[int, AdmittedRequest],
               can_follow: bool) -> list[ShareDecision]:
        return _decide(requests, boundaries, limits, computing, producers, "all" if can_follow else "")


@SHARING.register
@dataclass(frozen=True, slots=True)
class FollowPlanned:
    """Reuse what the producer was scheduled for, compute the rest (vLLM, SGLang; see the module docstring)."""

    name: str = "planned"

    def decide(self, requests: Sequence[Request], boundaries: Sequence[int], limits: Sequence[int],
               computing: Container[int], producers: Mapping[int, AdmittedRequest],
               can_follow: bool) -> list[ShareDecision]:
        if not can_follow:
            return [GO] * len(requests)
        return _decide(requests, boundaries, limits, computing, producers, "planned")


@SHARING.register
@dataclass(frozen=True, slots=True)
class WaitForProducer:
    """Wait (stay in line, later requests pass) until the producer's blocks are cached, then reuse them."""

    name: str = "wait"

    def decide(self, requests: Sequence[Request], boundaries: Sequence[int], limits: Sequence[int],
               computing: Container[int], producers: Mapping[int, AdmittedRequest],
               can_follow: bool) -> list[ShareDecision]:
        return _decide(requests, boundaries, limits, computing, producers, "")


@SHARING.register
@dataclass(frozen=True, slots=True)
class ComputeAgain:
    """Admit it now; it computes the blocks itself (TensorRT-LLM, see the module docstring)."""

    name: str = "off"

    def decide(self, requests: Sequence[Request], boundaries: Sequence[int], limits: Sequence[int],
               computing: Container[int], producers: Mapping[int, AdmittedRequest],
               can_follow: bool) -> list[ShareDecision]:
        return [GO] * len(requests)
