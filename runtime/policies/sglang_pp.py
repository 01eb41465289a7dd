"""SGLang's pipeline-parallel event loop, on our cache and engine (sgl-project/sglang,
``python/sglang/srt/managers/scheduler_pp_mixin.py`` ``event_loop_pp``, read at 0.5.9 and 0.5.23).

* a scheduler on every rank, in lockstep: PP0 reads new requests and relays them rank to rank
  (``_pp_send_pyobj_to_next_stage``, ``point_to_point_pyobj``) - ``RelayRequests``; each rank then schedules
  the same batch itself on the same state (``get_next_batch_to_run``) and runs its own radix-cache match
  - the per-rank lockstep host work of a conventional PP loop (``Lockstep``);
* a radix tree and a KV pool per rank, but since PR #10214 every rank's ``max_total_num_tokens`` is the
  all-reduced minimum (``_apply_token_constraints``), so the replicas take the same decisions: one manager's
  (``CentralManager``, ``CentralStage``, the tree's match as the lookup: ``FirstStageTree``);
* ``pp_loop_size = pp_size + pp_async_batch_depth`` micro-batches, the depth 0 by default (``Ring(1)``);
  the last rank's outputs travel the ring back to rank 0 before the micro-batch slot is reused
  (``_pp_send_recv_and_preprocess_output_tensors``: ``SampleStateRing``);
* ``chunked_prefill_size`` 16384 on a GPU of 160 GiB or more and dynamic chunking for PP
  (``--enable-dynamic-chunking``, recommended for PP by ``docs/advanced_features/pipeline_parallelism.md``):
  a quadratic fitted once, each continuing chunk sized to a fresh chunk's time, smoothed 0.75
  (``dynamic-16384``: ``runtime.mechanisms.chunking.DynamicPlanner``; PRs #15372, #16140, #17198);
* the extend budget counts the new tokens (``SuffixOnly``);
* a waiting request is matched when it joins a batch (``PrefillAdder``, ``match_prefix``:
  ``OnFirstScheduling``); the chunk just scheduled is inserted into the tree at the start of the next round
  (``cache_unfinished_req``; 0.5.23 ``stash_chunked_request`` -> ``tree_cache.checkpoint``), so it hits the
  blocks a running request was scheduled for in earlier rounds and computes the rest (``FollowPlanned``);
  blocks of chunks that ran are in the tree from their wave's retirement on (``AtRetire``).

A hybrid model: ``MambaRadixCache`` matches only down to the deepest node holding a state; with the
``extra_buffer`` strategy it keeps the state at each chunk's 64-aligned end - our snapshots at the interval.
Not modelled: SGLang sizes a separate state pool (``mamba_full_memory_ratio`` 0.9) where we take state slots
from the one pool.
"""

from wavepp.runtime.kvcache.pools import CentralManager
from wavepp.runtime.mechanisms.admission_drive import InlineRounds
from wavepp.runtime.mechanisms.block_publication import AtRetire
from wavepp.runtime.mechanisms.chunking import SGLANG_DYNAMIC
from wavepp.runtime.mechanisms.host_work import Lockstep
from wavepp.runtime.mechanisms.iteration import NoFill, RelayRequests, Ring, SampleStateRing
from wavepp.runtime.mechanisms.lookup_moment import OnFirstScheduling
from wavepp.runtime.mechanisms.reuse_lookup import FirstStageTree
from wavepp.runtime.mechanisms.sharing import FollowPlanned
from wavepp.runtime.mechanisms.stage_admission import CentralStage
from wavepp.runtime.mechanisms.token_charge import SuffixOnly
from wavepp.runtime.policies.base import Policy

SGLANG_PP = Policy("sglang-pp", admission=InlineRounds(), lookup=FirstStageTree(), stage_admission=CentralStage(),
                   charge=SuffixOnly(), chunking=SGLANG_DYNAMIC, ring=Ring(1), fill=NoFill(), relay=RelayRequests(),
                   host=Lockstep(), return_path=SampleStateRing(), pool=CentralManager(),
                   lookup_at=OnFirstScheduling(), publish=AtRetire(), share=FollowPlanned())
