"""TensorRT-LLM's pipeline loop (PyExecutor ``_executor_loop_pp``), on our cache and engine.

Sources (NVIDIA/TensorRT-LLM, ``tensorrt_llm/_torch/pyexecutor/`` and ``cpp/tensorrt_llm/batch_manager/``);
each mechanism's own docstring cites what it models:

* admission inside the loop on the first rank (``InlineRounds``);
* the first rank matches reuse alone; the other ranks ``add_sequence`` on the first chunk and
  fall back late when they lack the prefix (``FirstStageTree``, ``OnFirstChunk``);
* new requests relayed down the chain with their token ids (``RelayRequests``);
* per-iteration lockstep host work on every rank: schedule relay, scheduler re-run, radix
  walks of pending prompts, prompt copies (``Lockstep``);
* ``num_micro_batches = pp_size`` (``Ring(1)``), a slot reopening only once the last rank's
  sample state is back on rank 0 (``SampleStateRing``);
* every rank's KV pool as large as the smallest rank's: ``KVCacheManager.calculate_max_num_blocks``
  (``resource_manager.py``) takes ``allreduce(max_tokens, op=MIN)`` over the world (``SmallestEverywhere``);
* static chunks of ``max_num_tokens`` (default 8192), FCFS (``Static``); the budget charged
  for uncached tokens since the reuse credit (``SuffixOnly``: PRs #11637, #12976, #15066), or
  from position 0 before it (``FromPositionZero``).

Several chunks of one prompt may be in flight at once (PR #9308), as in WavePP.

When a request is looked up and when blocks become reusable (DESIGN §3.2):

* a waiting request is matched on its first chunk, when the micro-batch scheduler fits it under
  ``max_num_tokens`` (``add_sequence`` -> ``loadOrAllocateBlocks`` in ``prepare_resources``):
  ``OnFirstScheduling``;
* since PR #6683 ``KVCacheManager.update_resources`` stores the blocks of every context request of a handled
  micro-batch (``store_context_blocks``), so a document's executed chunks are reusable while it is computed
  (``AtRetire``); before it, at completion (``trtllm-pp-legacy``).

Not modelled, by their sources' own gates: the fp8 context-MLA attended-KV cap
(``_cap_context_by_total_kv_len``, PR #16399) is applied only with block reuse on *and chunked
prefill off* - this loop chunks; the PP termination vote (``DisaggPPTerminationHandler``, #7455)
runs only in disaggregated serving with a KV transceiver.
"""

import dataclasses

from wavepp.runtime.kvcache.pools import SmallestEverywhere
from wavepp.runtime.mechanisms.admission_drive import InlineRounds
from wavepp.runtime.mechanisms.block_publication import AtCompletion, AtRetire
from wavepp.runtime.mechanisms.chunking import Static, Whole
from wavepp.runtime.mechanisms.host_work import Lockstep
from wavepp.runtime.mechanisms.iteration import NoFill, RelayRequests, Ring, SampleStateRing
from wavepp.runtime.mechanisms.lookup_moment import OnFirstScheduling
from wavepp.runtime.mechanisms.reserve import WholePrompt
from wavepp.runtime.mechanisms.reuse_lookup import FirstStageTree
from wavepp.runtime.mechanisms.stage_admission import OnFirstChunk
from wavepp.runtime.mechanisms.token_charge import FromPositionZero, SuffixOnly
from wavepp.runtime.policies.base import Policy

#: The behaviour of TensorRT-LLM main as read from its source (2026): reuse-credited token budget.
TRTLLM_PP = Policy("trtllm-pp", admission=InlineRounds(), lookup=FirstStageTree(), stage_admission=OnFirstChunk(),
                   charge=SuffixOnly(), chunking=Static(), ring=Ring(1), fill=NoFill(),
                   relay=RelayRequests(), host=Lockstep(), return_path=SampleStateRing(), pool=SmallestEverywhere(),
                   lookup_at=OnFirstScheduling(), publish=AtRetire())

#: Releases before the reuse credit of PR #11637 (merged February 2026): a new context request's
#: budget is charged from position 0, cached prefix included; and before PR #11490, whose
#: capacity scheduler reserved blocks for the whole prompt, reused blocks included; and before PR #6683
#: (Aug 2025), which stores a context's blocks for each executed micro-batch, not at completion.
TRTLLM_PP_LEGACY = dataclasses.replace(TRTLLM_PP, name="trtllm-pp-legacy", charge=FromPositionZero(),
                                       reserve=WholePrompt(), publish=AtCompletion())

#: The LLM API's defaults (``llmapi/llm_args.py`` at NVIDIA/TensorRT-LLM 0004396720054fd8e205cbf616f21f0b57c6b412;
#: the 1.4.0rc4 API reference shows the same): ``enable_chunked_prefill=False``, so each context request runs
#: whole in one micro-batch of at most ``max_num_tokens`` (8192; the knob ``static_chunk_tokens``), FCFS up to
#: the first that does not fit (C++ ``MicroBatchScheduler`` without a chunk config), and a prompt longer than
#: ``max_num_tokens`` is refused at the API (``llmapi/llm.py`` ``_check_arguments``, PR #6259). A deployment
#: that keeps chunking off raises ``max_num_tokens`` to its longest prompt: the knob. docs/trtllm-defaults.md.
TRTLLM_PP_DEFAULT = dataclasses.replace(TRTLLM_PP, name="trtllm-pp-default", chunking=Whole())
