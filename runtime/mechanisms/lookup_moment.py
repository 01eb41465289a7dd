"""Lookup moment: when a waiting request's reuse is looked up (and its lease and escrow taken) - as soon
as an admission round reaches it, or only when it joins a batch.

WavePP admits ahead of the plan (its rounds run beside the loop), so a request is looked up on arrival.
The peers' schedulers look a waiting request up only when it is first scheduled: the budget of the step
goes to the running requests first, and a waiting request is matched and allocated only while some is
left. A request that waits for room meanwhile finds whatever its predecessors published by then
(:mod:`runtime.mechanisms.block_publication`), not what was cached when it arrived:

* vLLM v1 ``vllm/v1/core/sched/scheduler.py`` ``Scheduler.schedule``: running requests first, then the
  waiting queue while ``token_budget > 0``; ``kv_cache_manager.get_computed_blocks`` only for a request with
  ``num_computed_tokens == 0``, right before ``allocate_slots``;
* SGLang ``managers/schedule_policy.py`` ``PrefillAdder``: the chunked request first, then waiting requests
  while ``rem_chunk_tokens`` lasts; the radix match (``match_prefix``) when the batch is built
  (``get_new_batch_prefill``);
* TensorRT-LLM: the micro-batch scheduler fits context requests under ``max_num_tokens``; the match runs in
  ``KVCacheManager.add_sequence`` (``loadOrAllocateBlocks``) on a request's first chunk (``prepare_resources``).

The room is what the policy's planner leaves in the next wave after the admitted requests
(:meth:`runtime.planning.planner.Planner.room`), charged as the policy's token charge charges a first chunk.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from wavepp.runtime.planning.planner import Planner, Room
from wavepp.runtime.registry import Registry
from wavepp.runtime.request import AdmittedRequest


class LookupMoment(Protocol):
    @property
    def name(self) -> str: ...

    def room(self, planner: Planner, admitted: Sequence[AdmittedRequest]) -> Room | None:
        """What of the next wave a round may admit new requests into; None: no such limit."""
        ...


LOOKUP_MOMENT = Registry[LookupMoment]("lookup-at", doc="when a waiting request's reuse is looked up")


@LOOKUP_MOMENT.register
@dataclass(frozen=True, slots=True)
class OnAdmission:
    """Looked up when an admission round reaches it, whatever the next wave holds (WavePP)."""

    name: str = "admission"

    def room(self, planner: Planner, admitted: Sequence[AdmittedRequest]) -> Room | None:
        return None


@LOOKUP_MOMENT.register
@dataclass(frozen=True, slots=True)
class OnFirstScheduling:
    """Looked up when it joins a batch: a round admits requests only into the room the next wave has
    left (the peers' schedulers; see the module docstring). A planner without a fixed budget leaves no
    such limit."""

    name: str = "first-scheduling"

    def room(self, planner: Planner, admitted: Sequence[AdmittedRequest]) -> Room | None:
        return planner.room(admitted)
