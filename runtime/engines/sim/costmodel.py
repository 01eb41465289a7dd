"""Analytic roofline cost model of one pipeline-stage step (DESIGN.md §2 "Cost-aware chunking", §4).

A stage with layers ``[a, b)`` runs a *wave*: a batch of chunks, each ``x`` new tokens after ``L``
tokens already in the KV cache. Per layer the time is the roofline

    max(linear_flops / gemm_rate + attention_flops / attention_rate,  bytes / (hbm * hbm_efficiency))

summed over the stage's layers, split ideally over ``gpus_per_stage`` (TP/EP), plus fixed latencies.
``step_time`` is called ~1e5 times per simulated run, so everything that does not depend on the wave
is folded into a few per-stage layer groups in ``__init__`` and the hot path is plain float math.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Protocol

from wavepp.runtime.engines.sim.capacity import FREE_GPU_MEMORY_FRACTION, HEAD_BYTES, stage_memory, stage_weight_bytes
from wavepp.runtime.engines.sim.profiles import HardwareProfile, ModelProfile, split_layers

# Fractions of peak FLOP/s reached. Assumptions, to be replaced by calibration:
# ../shared/data/perf/FORMAT.md §3 reports an H200 bf16 GEMM at 29.5/41.1 = 0.72 of roofline and prefill
# attention at 15/31.6 = 0.47; grouped MoE GEMMs run below dense ones, hence 0.6.
GEMM_MFU = 0.6
ATTN_MFU = 0.5
# Element-wise kernels per decoder layer that each pay the hardware's fixed op latency: aiconfigurator prices
# add_norm x2, act_gate and the fused RoPE / KV-write / QK-norm extras as memory ops (FORMAT.md §6). Their
# bytes are in ACT_VECTORS_PER_LAYER; only the constant part is counted here.
OPS_PER_LAYER = 7
# Hidden-sized bf16 vectors read or written per token per layer outside the GEMM weights: two add+norm steps
# of 2h in and 2h out each (FORMAT.md §6 add_norm bytes per token). Assumption.
ACT_VECTORS_PER_LAYER = 8
ACT_BYTES = 2.0  # activations travel in bf16


@dataclass(frozen=True, slots=True)
class ChunkShape:
    """One chunk of a wave: ``tokens`` new tokens after ``context`` tokens already in the KV cache."""

    context: int  # L: tokens already cached before this chunk (reused prefix + earlier chunks)
    tokens: int  # x: new tokens in this chunk

    def __post_init__(self) -> None:
        if self.context < 0 or self.tokens < 1:
            raise ValueError(f"chunk needs context >= 0 and tokens >= 1, got {self.context}, {self.tokens}")


class CostModel(Protocol):
    """Times of the stage steps and inter-stage sends that the simulated clock advances by."""

    def step_time(self, stage: int, chunks: Sequence[ChunkShape]) -> float:
        """Seconds for ``stage`` to run one wave (a batch of chunks)."""
        ...

    def step_times(self, chunks: Sequence[ChunkShape]) -> list[float]:
        """:meth:`step_time` of one wave on every stage, in stage order (a model whose stages share their
        layers' prices computes them once)."""
        ...

    def transfer_time(self, stage: int, num_tokens: int) -> float:
        """Seconds to send the wave's activations from ``stage`` to ``stage + 1``."""
        ...

    @property
    def num_stages(self) -> int:
        """Number of pipeline stages."""
        ...


@dataclass(frozen=True, slots=True)
class _LayerGroup:
    """Layers of one stage that cost the same (dense / MoE, with / without the DSA indexer)."""

    count: int
    linear_flops_per_token: float  # 2 * active params
    static_weight_bytes: float  # weights every wave reads: attention, dense FFN, shared experts, router
    expert_weight_bytes: float  # one routed expert
    n_routed: int
    top_k: int
    attn_flops_per_pair: float  # per (query, key) pair
    index_flops_per_pair: float  # DSA indexer scores, per (query, key) pair; 0 on layers that reuse it
    kv_bytes_per_token: float
    act_bytes_per_token: float


@dataclass(frozen=True, slots=True)
class _Stage:
    layers: range
    groups: tuple[_LayerGroup, ...]
    weight_bytes: float  # everything resident on the stage, including embedding / LM head
    fixed_s: float  # launch overhead + per-layer op latencies (not split over GPUs)
    is_first: bool
    is_last: bool


def _attn_flops_per_pair(model: ModelProfile) -> float:
    """FLOPs of one (query, key) pair of attention, QK^T plus PV, over all heads.

    GQA: 2*d for the score and 2*d for the value, per head. MLA: the absorbed (MQA) form, in which every
    head scores the shared latent (kv_lora_rank + rope dims) and mixes it (kv_lora_rank) back. DeepSeek-V3.2
    builds its DSA sparse attention on this MQA mode of MLA for prefill and decode alike, and it needs no
    per-prefix rebuild: the unabsorbed form would be ~2x cheaper per pair but would re-expand the L cached
    latents through kv_b_proj on every chunk (the γ·L term of DESIGN.md §2). The W_UK / W_UV absorption
    matmuls are per query token and are already counted as kv_b_proj in the linear FLOPs.
    """
    if model.attention == "gqa":
        return 4.0 * model.num_heads * model.head_dim
    assert model.kv_lora_rank is not None and model.qk_rope_head_dim is not None
    return 2.0 * model.num_heads * (2 * model.kv_lora_rank + model.qk_rope_head_dim)


# What a PP hop carries: TensorRT-LLM's non-last ranks call pp_send_tensors([hidden_states, residual]) after
# their last layer (_torch/models/modeling_utils.py, DecoderModel.__pp_init__ / forward_before_send) - two
# [tokens, hidden] tensors in the model dtype - and pp_send_tensors issues one NCCL send per tensor
# (_torch/distributed/communicator.py: PPCommNCCL.send, ncclSend; research26 Q4).
HOP_TENSORS = 2


def activation_send_time(model: ModelProfile, hardware: HardwareProfile, num_tokens: int) -> float:
    """Seconds to send ``num_tokens`` tokens' activations to the next stage on the same node: two bf16
    ``[tokens, hidden]`` tensors, each one NCCL point-to-point send of p2p latency + bytes over NVLink.

    Each TP rank sends its own copy to its peer in the next stage over its own links, so the per-GPU
    single-direction bandwidth applies (``node.intra_node_bw``, ``node.p2p_latency`` of the system YAML).
    aiconfigurator prices a hop as one 2-byte tensor over ``inter_node_bw`` plus one latency, whether or
    not the stages share a node (aic-core ``operators/communication.rs`` ``P2POp``; FORMAT.md §6)."""
    per_tensor = num_tokens * model.hidden_size * ACT_BYTES / hardware.link_bytes_per_s
    return HOP_TENSORS * (hardware.p2p_latency_s + per_tensor)


def _causal_pairs(n: int, topk: int | None) -> float:
    """(query, key) pairs of the first ``n`` positions, each query seeing min(position + 1, topk) keys."""
    if topk is None or n <= topk:
        return n * (n + 1) / 2.0
    return topk * (topk + 1) / 2.0 + float(n - topk) * topk


class AnalyticCostModel:
    """Roofline ``CostModel`` of ``model`` split into ``pp`` stages of ``gpus_per_stage`` GPUs each.

    Linear layers run at fp8 FLOP/s for fp8-weight models and bf16 otherwise; attention at bf16; the DSA
    indexer at fp8 (as DeepSeek-V3.2 runs it). Bytes per layer: weights touched (for MoE, min(n_routed,
    tokens*top_k) routed experts), the KV of each chunk's prefix read, the new KV written, activations.
    """

    def __init__(self, model: ModelProfile, hardware: HardwareProfile, pp: int, gpus_per_stage: int = 1):
        if gpus_per_stage < 1:
            raise ValueError(f"gpus_per_stage must be >= 1, got {gpus_per_stage}")
        self.model = model
        self.hardware = hardware
        self.gpus_per_stage = gpus_per_stage
        linear_peak = hardware.fp8_flops if model.weight_bytes <= 1.0 else hardware.dense_flops
        self._linear_rate = linear_peak * GEMM_MFU
        self._attn_rate = hardware.dense_flops * ATTN_MFU
        self._index_rate = hardware.fp8_flops * ATTN_MFU
        self._head_rate = hardware.dense_flops * GEMM_MFU
        self._bw = hardware.hbm_bytes_per_s * hardware.hbm_efficiency
        # Sparse attention applies only where a DSA indexer picks the keys.
        self._topk = model.index_topk if model.index_full_layers else None
        self._head_bytes = model.embedding_params * HEAD_BYTES
        ranges = split_layers(model.num_layers, pp)
        self._stages = tuple(self._build_stage(r, s == 0, s == pp - 1) for s, r in enumerate(ranges))

    def _build_stage(self, layers: range, is_first: bool, is_last: bool) -> _Stage:
        m = self.model
        attn_pair = _attn_flops_per_pair(m)
        index_pair = 2.0 * (m.index_n_heads or 0) * (m.index_head_dim or 0)
        kv_layer = m.kv_bytes_per_token(1)
        act = ACT_VECTORS_PER_LAYER * m.hidden_size * ACT_BYTES
        counts: dict[_LayerGroup, int] = {}
        for layer in layers:
            total, active = m.layer_params(layer)
            moe = m.is_moe_layer(layer)
            expert = float(m.expert_params) if moe else 0.0
            n_routed = m.n_routed_experts if moe else 0
            group = _LayerGroup(
                count=1,
                linear_flops_per_token=2.0 * active,
                static_weight_bytes=(total - n_routed * expert) * m.weight_bytes,
                expert_weight_bytes=expert * m.weight_bytes,
                n_routed=n_routed,
                top_k=m.experts_per_token if moe else 0,
                attn_flops_per_pair=attn_pair,
                index_flops_per_pair=index_pair if m.has_indexer(layer) else 0.0,
                kv_bytes_per_token=kv_layer,
                act_bytes_per_token=act,
            )
            counts[group] = counts.get(group, 0) + 1
        groups = tuple(replace(g, count=n) for g, n in counts.items())
        weight_bytes = stage_weight_bytes(m, layers, is_first, is_last)
        hw = self.hardware
        fixed = hw.launch_overhead_s + len(layers) * OPS_PER_LAYER * hw.op_latency_s
        return _Stage(layers, groups, weight_bytes, fixed, is_first, is_last)

    @property
    def num_stages(self) -> int:
        """Number of pipeline stages."""
        return len(self._stages)

    def stage_layers(self, stage: int) -> range:
        """Decoder layers held by ``stage``."""
        return self._stage(stage).layers

    def stage_weight_bytes(self, stage: int) -> float:
        """Weight bytes on ``stage`` over all its GPUs (embedding on the first, LM head on the last)."""
        return self._stage(stage).weight_bytes

    def step_time(self, stage: int, chunks: Sequence[ChunkShape]) -> float:
        """Seconds for ``stage`` to run one wave; 0.0 for an empty wave (nothing is launched)."""
        st = self._stage(stage)
        if not chunks:
            return 0.0
        topk = self._topk
        tokens = 0
        context = 0
        dense_pairs = 0.0  # full causal attention: what the indexer scores
        attn_pairs = 0.0  # what the main attention computes (top-k keys per query under DSA)
        for chunk in chunks:
            lo, x = chunk.context, chunk.tokens
            tokens += x
            context += lo
            dense_pairs += lo * x + x * (x + 1) / 2.0
            if topk is not None:
                attn_pairs += _causal_pairs(lo + x, topk) - _causal_pairs(lo, topk)
        if topk is None:
            attn_pairs = dense_pairs
        bw = self._bw
        kv_tokens = context + tokens  # prefix read + new KV written
        total = 0.0
        for g in st.groups:
            compute = (
                g.linear_flops_per_token * tokens / self._linear_rate
                + g.attn_flops_per_pair * attn_pairs / self._attn_rate
                + g.index_flops_per_pair * dense_pairs / self._index_rate
            )
            touched = min(g.n_routed, tokens * g.top_k)
            nbytes = (
                g.static_weight_bytes
                + touched * g.expert_weight_bytes
                + g.kv_bytes_per_token * kv_tokens
                + g.act_bytes_per_token * tokens
            )
            mem = nbytes / bw
            total += g.count * (compute if compute > mem else mem)
        hidden = self.model.hidden_size
        if st.is_first:  # embedding gather: one row per new token
            total += tokens * hidden * HEAD_BYTES / bw
        if st.is_last:  # LM head on the last token of each chunk: weight-read bound
            head_compute = 2.0 * self.model.embedding_params * len(chunks) / self._head_rate
            total += max(head_compute, self._head_bytes / bw)
        return total / self.gpus_per_stage + st.fixed_s

    def step_times(self, chunks: Sequence[ChunkShape]) -> list[float]:
        """:meth:`step_time` on every stage."""
        return [self.step_time(s, chunks) for s in range(self.num_stages)]

    def transfer_time(self, stage: int, num_tokens: int) -> float:
        """Seconds to send ``num_tokens`` bf16 hidden states from ``stage`` to the next; 0.0 from the last."""
        self._stage(stage)
        if stage == len(self._stages) - 1:
            return 0.0
        return activation_send_time(self.model, self.hardware, num_tokens)

    def stage_kv_capacity_tokens(self, stage: int, memory_fraction: float = FREE_GPU_MEMORY_FRACTION) -> int:
        """Tokens of KV ``stage`` holds, as TensorRT-LLM sizes the pool from the memory its weights and runtime
        leave (:mod:`capacity`); never negative."""
        return stage_memory(self.model, self.hardware, len(self._stages), self.gpus_per_stage, stage,
                            memory_fraction).kv_tokens

    def _stage(self, stage: int) -> _Stage:
        if not 0 <= stage < len(self._stages):
            raise ValueError(f"stage {stage} out of range [0, {len(self._stages)})")
        return self._stages[stage]

