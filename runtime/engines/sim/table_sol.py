"""The speed-of-light times the table cost model carries measured utilisation through (FORMAT.md §5).

A shape the kernel tables did not time is priced at the utilisation of the nearest one they did: its
roofline time over that shape's measured utilisation. Only ratios of these times enter the model, so each is
a plain max(FLOP time, byte time) on one GPU of the stage, in seconds.
"""

from __future__ import annotations

from collections.abc import Callable

from wavepp.runtime.engines.sim.costmodel import _causal_pairs
from wavepp.runtime.engines.sim.profiles import HardwareProfile, ModelProfile


def gemm_sol(hw: HardwareProfile, dtype: str) -> Callable[[float, float, float], float]:
    """FORMAT §5 GEMM roofline: max(2mnk / FLOPS, bytes · (mn + mk + nk) / mem_bw), seconds."""
    flops = hw.dense_flops if dtype == "bfloat16" else hw.fp8_flops
    nbytes = 2.0 if dtype == "bfloat16" else 1.0
    return lambda m, n, k: max(2.0 * m * n * k / flops, nbytes * (m * n + m * k + n * k) / hw.hbm_bytes_per_s)


def gqa_sol(model: ModelProfile, hw: HardwareProfile, kv_heads: int, heads: float, seq: float,
            batch: float) -> float:
    """FORMAT §5 context attention: max(2·b·s²·n·d / FLOPS, (4·b·n·s·d + kvbytes·2·b·n_kv·s·d) / mem_bw), for
    ``heads`` query and ``kv_heads`` KV heads on the GPU."""
    d, kv = model.head_dim, model.kv_bytes
    compute = 2.0 * batch * seq * seq * heads * d / hw.dense_flops
    memory = (4.0 * batch * heads * seq * d + kv * 2.0 * batch * kv_heads * seq * d) / hw.hbm_bytes_per_s
    return max(compute, memory)


def dsa_sol(m: ModelProfile, hw: HardwareProfile, gemm_dtype: str, heads: float, prefix: float, seq: float,
            batch: float, indexer: bool = True) -> float:
    """Roofline of the DSA module on one GPU holding ``heads`` heads: ``batch`` chunks of ``seq`` new
    tokens after ``prefix`` cached ones, its projections at ``gemm_dtype``'s rate; max(FLOP time, byte time),
    seconds.

    The terms are the ones aic-core's ``dsa_context_sol`` (perf_database/dsa.rs) counts, from our profile:
    per-token projections at the module rows' GEMM rate - the MLA down-projection and the indexer are
    unsplit, q_b / o_proj and the absorbed k_b / v_b per local head; the indexer's fp8 scores, a logits
    row over all ``prefix + seq`` keys for every new token (``fp8_mqa_logits`` returns [tokens, keys]
    fp32 logits and top-k runs over whole rows; the causal bound only masks), only past ``index_topk``
    keys (``skip_indexer_for_short_seqs``, on by default); bf16 sparse MLA over min(position, index_topk)
    keys per query. Bytes: the projection weights once, each cached token's latent and indexer key once
    per chunk (a lower bound, as a roofline is). ``indexer=False``: a layer that reuses the top-k runs
    none of the indexer (no projections, no scores, no keys; NVIDIA/TensorRT-LLM#15574).
    """
    assert m.q_lora_rank is not None and m.kv_lora_rank is not None and m.qk_rope_head_dim is not None
    assert m.qk_nope_head_dim is not None and m.v_head_dim is not None and m.index_topk is not None
    h, q_lora, kv_lora, rope = m.hidden_size, m.q_lora_rank, m.kv_lora_rank, m.qk_rope_head_dim
    nope, v, topk = m.qk_nope_head_dim, m.v_head_dim, m.index_topk
    idx_heads, idx_dim = m.index_n_heads or 0, m.index_head_dim or 0
    tokens, full = batch * seq, prefix + seq
    scores = indexer and full > topk
    replicated = h * (q_lora + kv_lora + rope)  # fused q_a / kv_a down-projection
    if indexer:  # wq_b, wk, weights_proj
        replicated += q_lora * idx_heads * idx_dim + h * idx_dim + h * idx_heads
    per_head = q_lora * (nope + rope) + v * h + nope * kv_lora + kv_lora * v  # q_b, o_proj, absorbed k_b, v_b
    params = replicated + heads * per_head
    sparse_pairs = batch * (_causal_pairs(int(full), topk) - _causal_pairs(int(prefix), topk))
    scored = tokens * full if scores else 0.0  # each new token's logits row over all prefix + seq keys
    gemm_rate, weight_bytes = (hw.dense_flops, 2.0) if gemm_dtype == "bfloat16" else (hw.fp8_flops, 1.0)
    flop_s = (2.0 * tokens * params / gemm_rate
              + 2.0 * idx_heads * idx_dim * scored / hw.fp8_flops
              + 2.0 * heads * (2 * kv_lora + rope) * sparse_pairs / hw.dense_flops)
    key_bytes = (kv_lora + rope) * m.kv_bytes + (m.indexer_key_bytes if scores else 0.0)
    byte_s = (params * weight_bytes + batch * full * key_bytes) / hw.hbm_bytes_per_s
    return max(flop_s, byte_s)
