"""Tensor/expert-parallel deployments of the three engines: no pipeline - one stage over every GPU of the
node (TP attention and linear-attention heads, EP routed experts, all-reduces per layer:
``runtime.mechanisms.topology``), each engine's own scheduler, chunking and reuse as in its PP preset.

Without PP each engine overlaps its host work with the device, two batches in flight (``Ring(2)`` at P = 1)
and no return trip before a slot reopens (``DirectReturn``):

* TensorRT-LLM: ``_executor_loop_overlap`` (``disable_overlap_scheduler`` False by default) prepares iteration
  n + 1 while n runs; its own all-reduce kernel (``custom``);
* vLLM v1: ``max_concurrent_batches`` is 2 at ``pp_size`` 1 with async scheduling (``config/vllm.py``);
  NCCL all-reduces for prefill-sized messages;
* SGLang: the overlap scheduler (``event_loop_overlap``, on unless disabled) and, without PP, no dynamic
  chunking (it is PP-only): a static ``chunked_prefill_size`` of 16384; NCCL all-reduces.
"""

import dataclasses

from wavepp.runtime.mechanisms.chunking import STATIC_16K
from wavepp.runtime.mechanisms.iteration import DirectReturn, Ring
from wavepp.runtime.mechanisms.topology import TEP_NCCL, TensorExpert
from wavepp.runtime.policies.sglang_pp import SGLANG_PP
from wavepp.runtime.policies.trtllm_pp import TRTLLM_PP
from wavepp.runtime.policies.vllm_pp import VLLM_PP

TRTLLM_TEP = dataclasses.replace(TRTLLM_PP, name="trtllm-tep", topology=TensorExpert(), ring=Ring(2),
                                 return_path=DirectReturn())
VLLM_TEP = dataclasses.replace(VLLM_PP, name="vllm-tep", topology=TEP_NCCL, ring=Ring(2), return_path=DirectReturn())
SGLANG_TEP = dataclasses.replace(SGLANG_PP, name="sglang-tep", topology=TEP_NCCL, chunking=STATIC_16K, ring=Ring(2),
                                 return_path=DirectReturn())
