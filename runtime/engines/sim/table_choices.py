"""Where the kernel tables leave a choice to us, and where TensorRT-LLM's code and aiconfigurator's model of it
part: what :mod:`table_cost` needs to know about a model beyond its shape, and the ``Choices`` it prices under.

* DSA after a cached prefix: the module row is looked up at the new tokens and the exact prefix, as
  aiconfigurator 0.12.0 does (aic-core ``perf_database/dsa.rs`` ``query_context``: one 4-axis query
  (heads, prefix, seq, batch), raw-latency blending, "NOT ``isl + prefix``", "no multiplicative prefix
  correction"). That is how TensorRT-LLM runs it: the chunk's projections and its top-k-capped sparse
  attention are per new token, only the indexer's scores grow with ``L + x``. FORMAT's s² correction of the
  row at ``L + x`` charged a chunk after a long prefix about twice its per-token projections. The table's
  prefix axis holds only 0 and 128, so a longer prefix holds the utilisation of the 128 row against the
  module's speed-of-light time (:func:`table_sol.dsa_sol`), which carries the prefix.
* GLM-5.2 computes the indexer on 21 of its 78 layers (``indexer_types``) and TensorRT-LLM follows it: since
  NVIDIA/TensorRT-LLM#15574 ("Support DSA cross-layer indexer top-k sharing (e.g. GLM-5.2)") a "shared"
  layer builds no ``Indexer`` and reuses the preceding full layer's top-k (``sparse/dsa/module.py``
  ``forward_dsa_proj``: "DSA 'shared' layer: no indexer projection"). The module rows are GLM-5's, indexer
  on every layer; a shared layer is the same row scaled by SOL(without indexer) / SOL(with), the
  utilisation transfer FORMAT §5.4 applies to GEMM shapes the tables lack. aiconfigurator charges every
  layer as full on TensorRT-LLM (``sdk/models/deepseek_v32.py``: skip rows come only from its SGLang
  collector), so it prices GLM-5.2's long-context steps higher than we do.
* The DSA module of GLM-5.2-FP8 is read from the ``fp8_block`` rows: TensorRT-LLM quantizes its q/kv/o
  projections (``load_hf_quant_config`` excludes only ``*kv_b_proj*``, ``*k_b_proj*``, ``*eh_proj`` and the
  checkpoint's ``modules_to_not_convert``, whose ``self_attn`` entries are layernorms and the indexer's
  ``indexers_proj``). aiconfigurator 0.12.0 reads those layernorm entries as a whole-block exclusion
  (``helpers.attention_projection_exclusions``: any ``self_attn`` pattern without a projection name) and
  prices the module from its bf16-GEMM rows, 4-15% dearer.
* The shared expert is split over the stage's TP group, as TensorRT-LLM's ``Deepseekv3MoE`` does
  (``_compute_shared_expert_tp_size``: ``gcd(intermediate_size // block_size, mapping.tp_size)``, 1 only
  under attention DP; ``modeling_deepseekv3.py`` @a43cf9e3); aiconfigurator's DeepSeek-V3.2 / GLM-5 model
  divides it by ``moe_tp_size`` instead, which is 1 under EP (``deepseek_v32.py`` shared GEMMs).
* A wave's chunks of equal (L, x) share one lookup along the table's batch axis; chunks of different
  shapes are looked up apart and summed (their attention runs as separate problems either way).
"""

from __future__ import annotations

from dataclasses import dataclass

FP8_BLOCK = 128  # weight_block_size of both FP8 checkpoints (quantization_config)


@dataclass(frozen=True, slots=True)
class TableSpec:
    """What the tables need to know about a model beyond its shape."""

    gemm_dtype: str  # gemm_perf / moe_perf dtype of the served checkpoint
    moe_distribution: str  # moe_perf routing skew (FORMAT §4: DeepSeek-style 1.01, generic MoE 1.2)
    dsa_module: str | None = None  # dsa_context_module_perf ``model`` measured for this architecture
    attention_extras: int = 0  # element-wise ops fused into GQA attention (RoPE, KV write, QK-norm)
    hybrid: bool = False  # linear-attention + MLA layers and a latent MoE, priced by hybrid_ops


# The models the tables cover. Both serve block-scaled FP8 checkpoints (GLM-5.2-FP8; MiniMax-M2.7's
# quantization_config: fp8, weight_block_size 128x128), so GEMMs and experts use the fp8_block rows.
SPECS: dict[str, TableSpec] = {
    # glm_moe_dsa is the DeepSeek-V3.2 architecture: DeepSeek's power_law_1.01 routing; the DSA module rows
    # are zai-org/GLM-5's (same attention shape as GLM-5.2: 64 heads, q_lora 2048, kv_lora 512, index 32x128).
    "glm-5.2": TableSpec("fp8_block", "power_law_1.01", dsa_module="zai-org/GLM-5"),
    # Generic MoE routing (power_law_1.2); use_qk_norm true: RoPE, KV write and QK-norm are fused extras.
    "minimax-m2.7": TableSpec("fp8_block", "power_law_1.2", attention_extras=3),
    # Everything but the routed experts is bf16 in the checkpoint (profiles._KIMI_K3); aiconfigurator's
    # kimi_k3 model routes with power_law_1.01. Its MoE curve is hybrid_ops' own (no TRT-LLM table has it).
    "kimi-k3": TableSpec("bfloat16", "power_law_1.01", hybrid=True),
}


@dataclass(frozen=True, slots=True)
class Choices:
    """Where TensorRT-LLM's code and aiconfigurator's model of it part (module docstring). The defaults follow
    TensorRT-LLM; :meth:`aiconfigurator` prices as aiconfigurator 0.12.0 does, so the estimator comparison
    (tests/engines/sim/test_estimator.py) can show that these choices explain the gap between the two."""

    indexer_reuse: bool = True  # GLM-5.2's "shared" DSA layers skip the indexer (NVIDIA/TensorRT-LLM#15574)
    shared_expert_tp: bool = True  # the shared expert is split over the stage's TP group
    dsa_gemm_type: str | None = None  # DSA module rows' gemm_type; None: the checkpoint's GEMM dtype
    comm: str = "custom"  # the TP all-reduce: TensorRT-LLM's kernel ("custom") or NCCL's ("nccl"; mechanisms.topology)

    @classmethod
    def aiconfigurator(cls) -> Choices:
        """Every DSA layer computes the indexer; the shared expert is split by moe_tp (1 under EP); the DSA
        module of an FP8 GLM checkpoint read from its bf16-GEMM rows (module docstring)."""
        return cls(indexer_reuse=False, shared_expert_tp=False, dsa_gemm_type="bfloat16")


TRTLLM = Choices()  # TensorRT-LLM's own choices: the default everywhere
