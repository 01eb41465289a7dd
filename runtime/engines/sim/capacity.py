"""KV-cache capacity of one pipeline stage, sized as TensorRT-LLM sizes its pool (research26 Q1).

TensorRT-LLM's ``KvCacheCreator`` (``_torch/pyexecutor/_util.py``) loads the weights, runs a dummy forward of
``max_num_tokens``, and sizes the pool from what is left on each GPU::

    available_kv_mem = (total_gpu_memory - peak_memory + allocated_bytes) * free_gpu_memory_fraction

``peak_memory`` is the profiled torch peak (weights, activations, the temporary estimation pool
``allocated_bytes``, which is added back) plus what lives outside torch (NCCL, the CUDA context, cuBLAS). So
the fraction - 0.9 by default (``KvCacheConfig.free_gpu_memory_fraction``, ``llm_args.py``) - applies to the
memory left after weights and the runtime's peak, not to the total. The pool then holds
``available_kv_mem // cache_bytes_per_token`` tokens (``KVCacheManager.calculate_max_num_blocks``), the bytes
per token counting only this PP rank's layers (``get_cache_size_per_token``, ``mapping.pp_layers``).

Per stage, per GPU (every GPU of a stage holds the same)::

    pool   = (HBM - stage weights / GPUs - activations - NCCL - other) x 0.9
    tokens = pool // KV bytes per token on one GPU of the stage

Where numbers cannot be profiled here they come from aiconfigurator's TensorRT-LLM memory model, which NVIDIA
calibrated against TensorRT-LLM (``sdk/backends/base_backend.py`` ``_get_memory_usage``,
``trtllm_backend.py`` ``ACTIVATION_COEFFICIENTS``): activations of a ``max_num_tokens`` forward, and the
system YAML's ``misc.nccl_mem`` / ``misc.other_mem`` (profiles.py). TensorRT-LLM then takes the minimum
over all ranks (``allreduce MIN``); that is the baseline's business (a policy), not the engine's: here each
stage keeps its own capacity (DESIGN §1).

Assumptions: the stage's weights split evenly over its GPUs (parts kept whole on every TP rank - the MLA
down-projection and the DSA indexer, which aiconfigurator's roofline treats as unsplit - would add at most
about 0.2 GB per GPU on a GLM-5.2 stage, 0.1% of its pool); weights at the checkpoint's dtype, embedding and LM
head bf16, block scales not counted (1/16384 of fp8 weights), kv_b_proj's bf16 copy (TensorRT-LLM excludes
``*kv_b_proj*`` from fp8) not counted either (15 MB per layer).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from wavepp.runtime.engines.sim.profiles import HardwareProfile, ModelProfile, split_layers

FREE_GPU_MEMORY_FRACTION = 0.9  # KvCacheConfig.free_gpu_memory_fraction default (tensorrt_llm/llmapi/llm_args.py)
# The largest forward TensorRT-LLM's estimation run profiles: max_num_tokens. WavePP's waves reach the
# published M = 16384 (Knobs.max_wave_tokens, DESIGN §2), so the deployment sets at least that.
MAX_NUM_TOKENS = 16384
HEAD_BYTES = 2.0  # embedding and LM head stay bf16 in both FP8 checkpoints (modules_to_not_convert: lm_head)
# aiconfigurator trtllm_backend.ACTIVATION_COEFFICIENTS: activation bytes = 2 x tokens x (heads x head_dim)
# x coefficient[min(tp, 8)], per model family ("tuned for TRT-LLM's measurement workflow").
_COEFFICIENTS = {
    "moe": {1: 22.0, 2: 13.0, 4: 10.0, 8: 10.0},  # "MOE", "DEEPSEEK", "DEEPSEEKV32" (GLM-5.2)
    "llama": {1: 11.0, 2: 6.5, 4: 5.0, 8: 5.0},  # "LLAMA"
}
# Families whose fp8 block-scale MoE dispatch workspace is added (base_backend.MOE_WORKSPACE_FAMILIES holds
# the DeepSeek families, GLM-5.2's DEEPSEEKV32 among them; not the generic MOE of MiniMax-M2.7).
_MOE_WORKSPACE = frozenset({"glm-5.2"})
MIN_ACTIVATION_BYTES = 70 * 1024 * 1024  # base_backend.MIN_ACTIVATION_BYTES


def stage_weight_bytes(model: ModelProfile, layers: range, is_first: bool, is_last: bool) -> float:
    """Weight bytes of a stage over all its GPUs: its layers, the embedding on the first, the LM head on the last."""
    total = sum(model.layer_weight_bytes(i) for i in layers)
    return total + (is_first + is_last) * model.embedding_params * HEAD_BYTES


def kv_bytes_per_token_per_gpu(model: ModelProfile, layers: range, gpus: int) -> float:
    """KV bytes one token takes on one GPU of a stage holding ``layers`` over ``gpus`` TP ranks.

    MLA caches the latent plus the RoPE key, whole on every TP rank (``get_cache_size_per_token``: ``head_dim =
    kv_lora_rank + qk_rope_head_dim``, ``kv_factor`` 1, no TP split), and DSA adds the indexer's key on the
    layers that own an indexer (NVIDIA/TensorRT-LLM#16558; ``ModelProfile.indexer_key_bytes``, uint8 whatever
    the KV dtype). GQA splits the KV heads over TP (a rank holds ceil(kv_heads / tp) of them).
    """
    attending = model.attention_layers(layers)      # a hybrid model's linear layers keep a state, not KV
    if model.attention == "mla":
        latent = model.kv_bytes_per_token(attending)
        return latent + sum(model.has_indexer(i) for i in layers) * model.indexer_key_bytes
    local_heads = math.ceil(model.num_kv_heads / gpus)
    return 2.0 * local_heads * model.head_dim * model.kv_bytes * attending


def activation_bytes(model: ModelProfile, gpus: int, max_num_tokens: int = MAX_NUM_TOKENS) -> float:
    """Activation peak of a ``max_num_tokens`` forward on one GPU, as aiconfigurator models TensorRT-LLM's."""
    family = "moe" if model.n_routed_experts else "llama"
    width = model.num_heads * model.head_dim  # aiconfigurator's h: num_heads x head_size (the config's head_dim)
    listed = _COEFFICIENTS[family]           # for 1, 2, 4, 8 GPUs: a group in between takes the size below it
    act = 2.0 * max_num_tokens * width * listed[max(g for g in listed if g <= min(gpus, 8))]
    if model.name in _MOE_WORKSPACE:  # 128-wide block scales, 4-byte floats, per routed (token, expert) pair
        act += max_num_tokens * width * model.n_routed_experts * model.experts_per_token / gpus / 128 * 4
    return max(act, MIN_ACTIVATION_BYTES)


@dataclass(frozen=True, slots=True)
class StageMemory:
    """One GPU of a stage, in bytes: what TensorRT-LLM's ``KvCacheCreator`` subtracts, and the pool left."""

    hbm: float
    weights: float  # this GPU's share of the stage's weights
    activations: float
    nccl: float
    other: float
    kv_bytes_per_token: float
    fraction: float

    @property
    def kv_pool(self) -> float:
        """(HBM - weights - activations - NCCL - other) x fraction; never negative."""
        return max(0.0, self.hbm - self.weights - self.activations - self.nccl - self.other) * self.fraction

    @property
    def kv_tokens(self) -> int:
        """Tokens of KV the stage holds (every GPU of the stage holds its share of the same tokens)."""
        return int(self.kv_pool // self.kv_bytes_per_token)


def stage_memory(model: ModelProfile, hardware: HardwareProfile, pp: int, gpus_per_stage: int, stage: int,
                 fraction: float = FREE_GPU_MEMORY_FRACTION, max_num_tokens: int = MAX_NUM_TOKENS) -> StageMemory:
    """The memory of ``stage`` of ``model`` split into ``pp`` stages of ``gpus_per_stage`` GPUs."""
    if not 0.0 < fraction <= 1.0:
        raise ValueError(f"free GPU memory fraction must be in (0, 1], got {fraction}")
    if gpus_per_stage < 1:
        raise ValueError(f"gpus_per_stage must be >= 1, got {gpus_per_stage}")
    ranges = split_layers(model.num_layers, pp)
    if not 0 <= stage < pp:
        raise ValueError(f"stage {stage} out of range [0, {pp})")
    layers = ranges[stage]
    g = gpus_per_stage
    return StageMemory(
        hbm=hardware.mem_capacity_bytes,
        weights=stage_weight_bytes(model, layers, stage == 0, stage == pp - 1) / g,
        activations=activation_bytes(model, g, max_num_tokens),
        nccl=hardware.nccl_reserve_bytes(g),
        other=hardware.reserve_bytes_per_gpu,
        kv_bytes_per_token=kv_bytes_per_token_per_gpu(model, layers, g),
        fraction=fraction,
    )
