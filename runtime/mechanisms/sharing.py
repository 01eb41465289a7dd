"""Sharing in flight: what an admission round does with a request whose next uncached block another
admitted request is computing right now (many requests on one long document that no stage holds yet).

Without it every such request computes the document again, and under pressure that duplicate work
is most of what the pipeline computes: GLM-5.2 PP4, 13 documents of ~256K tokens at c=32 (the pressure
grid's ``docs 256K ws 0.5x``), 33 of 128 requests recomputed a document another request was computing,
9.0M of 13.3M computed tokens. WavePP's admission knows every admitted request's blocks, so it can
hold such a request back until the producer completes and then lease the whole prefix (SGLang
does the same within a batch: ``schedule_policy.py`` deprioritises waiting requests whose prefix
an earlier request of the batch will compute, ``IN_BATCH_PREFIX_CACHING_*``). The baselines keep
TensorRT-LLM's behaviour: blocks become reusable when a context completes (``storeContextBlocks``)
and the scheduler admits a request whatever is in flight.
"""

from __future__ import annotations

from collections.abc import Container, Sequence
from dataclasses import dataclass
from typing import Protocol

from wavepp.runtime.registry import Registry
from wavepp.runtime.request import Request


class Sharing(Protocol):
    @property
    def name(self) -> str: ...

    def waiting(self, requests: Sequence[Request], boundaries: Sequence[int], limits: Sequence[int],
                computing: Container[int]) -> list[bool]:
        """Per request of a round (in line order), with its hinted reuse ``boundaries`` (at most its
        ``limits``, in blocks): whether it waits for a request that computes its next block - one
        admitted earlier (``computing``) or one ahead of it in this round."""
        ...


SHARING = Registry[Sharing]("share", doc="a request whose next block another request is computing")


@SHARING.register
@dataclass(frozen=True, slots=True)
class WaitForProducer:
    """Wait (stay in line, later requests pass) until the producer's blocks are cached, then reuse them."""

    name: str = "wait"

    def waiting(self, requests: Sequence[Request], boundaries: Sequence[int], limits: Sequence[int],
                computing: Container[int]) -> list[bool]:
        ahead: set[int] = set()          # blocks the requests going ahead in this round will compute
        out = []
        for r, k, limit in zip(requests, boundaries, limits, strict=True):
            hashes = r.block_hashes
            waits = k < limit and (hashes[k] in computing or hashes[k] in ahead)
            if not waits:
                ahead.update(hashes[k:])
            out.append(waits)
        return out


@SHARING.register
@dataclass(frozen=True, slots=True)
class ComputeAgain:
    """Admit it now; it computes the blocks itself (TensorRT-LLM, see the module docstring)."""

    name: str = "off"

    def waiting(self, requests: Sequence[Request], boundaries: Sequence[int], limits: Sequence[int],
                computing: Container[int]) -> list[bool]:
        return [False] * len(requests)
