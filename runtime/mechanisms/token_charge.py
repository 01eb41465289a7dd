"""Token charge: what a chunk costs against a wave's token budget.

A chunk computes tokens ``[start, start + length)`` after the reused prefix. What it *costs*
against the budget (``max_num_tokens``) depends on where the scheduler believes the request
stands when it sizes the chunk - its "position". The packer (:func:`runtime.planning.planner.pack_fcfs`)
charges from that position and computes from the real one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from wavepp.runtime.registry import Registry
from wavepp.runtime.request import AdmittedRequest


class TokenCharge(Protocol):
    @property
    def name(self) -> str: ...

    def position(self, a: AdmittedRequest) -> int:
        """The token from which the scheduler charges ``a``'s next chunk (``<= a.scheduled``)."""
        ...

    def first_charge(self, num_tokens: int, reused_tokens: int) -> int:
        """What a new request of ``num_tokens`` with ``reused_tokens`` cached would be charged in full."""
        ...


CHARGE = Registry[TokenCharge]("charge", doc="what a chunk costs against a wave's budget")


@CHARGE.register
@dataclass(frozen=True, slots=True)
class SuffixOnly:
    """Only uncached tokens are charged: the scheduler knows the reuse boundary when it plans
    (WavePP admits - lease and escrow - before it plans). Also TensorRT-LLM's micro-batch
    scheduler since the reuse credit (PR #11637, non-last chunks charged at their size by
    #12682/#12976, cached-but-unreferenced blocks credited by #15066): the last chunk costs
    ``remaining - reusable``, which is what is computed."""

    name: str = "suffix"

    def position(self, a: AdmittedRequest) -> int:
        return a.scheduled

    def first_charge(self, num_tokens: int, reused_tokens: int) -> int:
        return num_tokens - reused_tokens


@CHARGE.register
@dataclass(frozen=True, slots=True)
class FromPositionZero:
    """TensorRT-LLM's micro-batch scheduler before the reuse credit (PR #11637): a new context
    request is sized from position 0 - ``getContextRemainingLength() = promptLen -
    contextCurrentPosition`` with the position still 0 - and FCFS chunking charges
    ``min(capacity, remaining)`` (``setCtxRequestsChunkSize<kFIRST_COME_FIRST_SERVED>``). Only
    then does ``add_sequence`` find the reuse and ``setPrepopulatedPromptLen`` move the chunk to
    the cached position, flooring its end to a block (``llmRequest.h``). So with
    ``max_num_tokens`` 8192 a 36K-token prompt with a 4K suffix fills a micro-batch and computes
    4K. Later chunks of the request start past the prefix and are charged what they compute."""

    name: str = "position0"

    def position(self, a: AdmittedRequest) -> int:
        first_chunk = a.scheduled == a.reused_tokens
        return 0 if first_chunk else a.scheduled

    def first_charge(self, num_tokens: int, reused_tokens: int) -> int:
        return num_tokens
