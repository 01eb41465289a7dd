"""vLLM v1's pipeline-parallel engine, on our cache and engine (vllm-project/vllm, ``vllm/v1/``, read at 0.33.0).

* one scheduler with one KV cache manager for all PP stages (``core/sched/scheduler.py``,
  ``core/kv_cache_manager.py``): a prefix hit is one length for the whole pipeline, no stage evicts on its
  own, and every worker's pool is the smallest worker's (``get_kv_cache_configs`` takes the minimum
  ``num_blocks``) - ``CentralManager``, ``CentralStage``, the manager's own tree as the lookup
  (``FirstStageTree`` on stage 0, which is the manager);
* the scheduler runs in the engine core's step loop, before the batch it schedules (``InlineRounds``);
* ``max_concurrent_batches = pp_size`` (``config/vllm.py``): ``step_with_batch_queue`` keeps that many
  batches in flight and, when the queue is full, waits for the oldest - whose sampled tokens come back to
  the scheduler before its slot reopens (``Ring(1)``, ``SampleStateRing``);
* the scheduler's output, new requests' token ids included, goes to every worker each step
  (``RelayRequests``; vLLM broadcasts it over shared memory, we charge it per token like a relay);
* a token budget of ``max_num_batched_tokens`` per step, 16384 on a GPU of 160 GiB or more, FCFS, each
  chunk as large as the budget left (``long_prefill_token_threshold`` 0): ``static-16384``; charged for the
  tokens not yet computed (``num_computed_tokens`` starts at the hit: ``SuffixOnly``);
* a waiting request is looked up when it is first scheduled (``get_computed_blocks`` while
  ``num_computed_tokens == 0``, under ``token_budget``: ``OnFirstScheduling``); the blocks of a scheduled
  chunk are cached when scheduled, before the forward (``allocate_slots`` -> ``cache_blocks``), so it hits
  every block a running request was scheduled for and computes the rest of a shared document itself
  (``FollowPlanned``); blocks of chunks that ran are in the tree from their wave's retirement on
  (``AtRetire``). Not modelled: a hit on the chunk the producer is scheduled for in the same step (the
  planner looks waiting requests up before it packs the running ones, one wave later than vLLM at most).

A hybrid model: ``HybridKVCacheCoordinator.find_longest_cache_hit`` shrinks the hit until every layer group
agrees, and ``MambaManager`` (``mamba_cache_mode="align"``) resumes only at block-aligned positions where a
state was kept - our snapshots, in the one manager (``runtime.kvcache.state_snapshots``).

Not modelled: vLLM allocates blocks step by step (``allocate_slots`` for the scheduled tokens) and preempts a
running request when a step cannot get them; here the manager escrows a request's whole suffix at
admission (``SuffixBlocks``), which admits no more than vLLM would and never preempts. aiconfigurator charges
vLLM prefill 0.8 ms of CPU dispatch per layer per request (``sdk/backends/vllm_backend.py``
``_prefill_dispatch_overhead_ms``) once per request, to its TTFT only, not to step time; we add no such
constant.
"""

from wavepp.runtime.kvcache.pools import CentralManager
from wavepp.runtime.mechanisms.admission_drive import InlineRounds
from wavepp.runtime.mechanisms.block_publication import AtRetire
from wavepp.runtime.mechanisms.chunking import STATIC_16K
from wavepp.runtime.mechanisms.iteration import NoFill, RelayRequests, Ring, SampleStateRing
from wavepp.runtime.mechanisms.lookup_moment import OnFirstScheduling
from wavepp.runtime.mechanisms.reuse_lookup import FirstStageTree
from wavepp.runtime.mechanisms.sharing import FollowPlanned
from wavepp.runtime.mechanisms.stage_admission import CentralStage
from wavepp.runtime.mechanisms.token_charge import SuffixOnly
from wavepp.runtime.policies.base import Policy

VLLM_PP = Policy("vllm-pp", admission=InlineRounds(), lookup=FirstStageTree(), stage_admission=CentralStage(),
                 charge=SuffixOnly(), chunking=STATIC_16K, ring=Ring(1), fill=NoFill(), relay=RelayRequests(),
                 return_path=SampleStateRing(), pool=CentralManager(),
                 lookup_at=OnFirstScheduling(), publish=AtRetire(), share=FollowPlanned())
