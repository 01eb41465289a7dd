"""Model and hardware profiles for the simulated engine.

Every number here is vendored (the runtime never reads ``../shared/data``); each constant cites the
file and field it came from, and ``tests/engines/sim/test_profiles.py`` checks them against that
data whenever it is present.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

# The hardware profiles live in their own module; re-exported here, where every cost model finds them.
from wavepp.runtime.engines.sim.hardware import HARDWARE as HARDWARE
from wavepp.runtime.engines.sim.hardware import HardwareProfile as HardwareProfile
from wavepp.runtime.engines.sim.hardware import get_hardware as get_hardware

# KV-cache dtypes a deployment may choose, bytes per element. TensorRT-LLM's default
# (KvCacheConfig.dtype "auto") keeps the checkpoint's KV quantization, and an HF FP8 block-scale checkpoint
# (GLM-5.2-FP8, MiniMax-M2.7: quant_method fp8, weight_block_size, no kv_cache_quant_algo) declares none,
# so the pool takes the model dtype, bf16 (_util.py _create_kv_cache_manager; research26 Q2). fp8 needs
# kv_cache_config.dtype="fp8" (trtllm-serve --kv_cache_dtype, NVIDIA/TensorRT-LLM#11487).
KV_DTYPES: dict[str, float] = {"bf16": 2.0, "fp8": 1.0}
DEFAULT_KV_DTYPE = "bf16"


@dataclass(frozen=True, slots=True)
class ModelProfile:
    """Shape of a decoder-only model, as far as the roofline cost model needs it.

    Layer ``i`` is dense when ``n_routed_experts == 0`` or ``i < first_k_dense``, MoE otherwise.
    """

    name: str
    num_layers: int
    hidden_size: int
    vocab_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int  # GQA: per-head dim of q/k/v (unused for MLA, kept as the config states it)
    attention: Literal["gqa", "mla"]
    intermediate_size: int  # dense FFN intermediate size (layers before first_k_dense, or all if no MoE)
    weight_bytes: float  # bytes per weight element as served (fp8 = 1, bf16 = 2)
    kv_bytes: float  # bytes per KV element as deployed: KV_DTYPES (bf16 = 2, TensorRT-LLM's default here)
    max_context: int
    # MLA (None for gqa)
    q_lora_rank: int | None = None  # None with MLA: q is projected directly from the hidden state
    kv_lora_rank: int | None = None
    qk_nope_head_dim: int | None = None
    qk_rope_head_dim: int | None = None
    v_head_dim: int | None = None
    # MoE (n_routed_experts == 0: dense model)
    n_routed_experts: int = 0
    experts_per_token: int = 0
    moe_intermediate_size: int = 0
    n_shared_experts: int = 0
    first_k_dense: int = 0
    # DSA sparse attention (DeepSeek-V3.2 style lightning indexer; None: dense attention).
    index_n_heads: int | None = None
    index_head_dim: int | None = None
    index_topk: int | None = None  # keys each query attends to
    index_full_layers: frozenset[int] = frozenset()  # layers that compute the indexer (others reuse it)
    attention_output_gate: bool = False  # a sigmoid gate on the attention output (its own h -> heads*v GEMM)
    # Hybrid models: layers with a recurrent state instead of KV (Kimi Delta Attention: linear attention with a
    # short causal conv over q, k and v and one heads x dim x dim state per sequence); the others attend.
    linear_layers: frozenset[int] = frozenset()
    linear_num_heads: int = 0
    linear_head_dim: int = 0
    linear_conv_kernel: int = 0
    state_bytes: float = 4.0  # bytes per element of the recurrent state (fp32)
    conv_state_bytes: float = 2.0  # bytes per element of the conv tail (bf16)
    # Latent MoE: routed experts work in a narrower space, entered and left through two projections per layer.
    routed_hidden_size: int | None = None
    expert_weight_bytes: float | None = None  # routed experts' bytes per weight as served (None: weight_bytes)

    @property
    def kv_dtype(self) -> str:
        """The KV-cache dtype's name (a key of KV_DTYPES)."""
        return next(name for name, nbytes in KV_DTYPES.items() if nbytes == self.kv_bytes)

    def with_kv_dtype(self, kv_dtype: str) -> ModelProfile:
        """This model with its KV cache in ``kv_dtype`` ("bf16" | "fp8")."""
        if kv_dtype not in KV_DTYPES:
            raise ValueError(f"unknown KV dtype {kv_dtype!r} ({', '.join(KV_DTYPES)})")
        return replace(self, kv_bytes=KV_DTYPES[kv_dtype])

    def is_linear(self, layer: int) -> bool:
        """True when decoder layer ``layer`` keeps a recurrent state instead of KV (a hybrid model's)."""
        return layer in self.linear_layers

    def attention_layers(self, layers: range) -> int:
        """How many of ``layers`` attend (and so hold KV)."""
        return sum(1 for i in layers if i not in self.linear_layers)

    def state_bytes_per_sequence(self, layers: range, gpus: int) -> float:
        """Bytes of one sequence's recurrent state over the linear layers among ``layers``, on one of ``gpus``
        TP ranks (heads split over them): per layer the heads x dim x dim state and the conv tail of
        (kernel - 1) positions of q, k and v (TensorRT-LLM / FLA short conv keeps kernel - 1 past inputs)."""
        n = sum(1 for i in layers if i in self.linear_layers)
        if not n:
            return 0.0
        heads = self.linear_num_heads / gpus
        d = self.linear_head_dim
        recurrent = heads * d * d * self.state_bytes
        conv = (self.linear_conv_kernel - 1) * 3 * heads * d * self.conv_state_bytes
        return n * (recurrent + conv)

    def kv_bytes_per_token(self, num_layers: int) -> float:
        """KV-cache bytes one token occupies over ``num_layers`` attention layers.

        MLA caches the compressed latent plus the decoupled RoPE key; GQA caches K and V per KV head.
        The DSA indexer's key cache (``index_head_dim`` fp8 values on indexer layers, ~3% of the MLA
        cache for GLM-5.2) is not counted.
        """
        if self.attention == "mla":
            assert self.kv_lora_rank is not None and self.qk_rope_head_dim is not None
            per_layer = float(self.kv_lora_rank + self.qk_rope_head_dim)
        else:
            per_layer = 2.0 * self.num_kv_heads * self.head_dim
        return per_layer * self.kv_bytes * num_layers

    @property
    def indexer_key_bytes(self) -> int:
        """Bytes of one token's DSA indexer key on a layer that computes the indexer: ``index_head_dim`` fp8
        values and one fp32 scale per 128 of them (TensorRT-LLM ``DSACacheManager``: ``index_head_dim +
        index_head_dim // quant_block_size * 4``, raw uint8 whatever the KV dtype, NVIDIA/TensorRT-LLM#16558;
        fp8 is ``DeepSeekSparseAttentionConfig``'s default ``indexer_k_dtype``, research26 Q2). 0 without DSA."""
        if self.index_head_dim is None:
            return 0
        return self.index_head_dim + self.index_head_dim // 128 * 4

    def is_moe_layer(self, layer: int) -> bool:
        """True when decoder layer ``layer`` has a routed-expert FFN."""
        return self.n_routed_experts > 0 and layer >= self.first_k_dense

    def has_indexer(self, layer: int) -> bool:
        """True when decoder layer ``layer`` computes the DSA indexer itself."""
        return layer in self.index_full_layers

    @property
    def embedding_params(self) -> int:
        """Parameters of the input embedding (the untied LM head has the same count)."""
        return self.vocab_size * self.hidden_size

    @property
    def expert_params(self) -> int:
        """Parameters of one routed SwiGLU expert: gate, up and down projections (in the latent width of a
        latent MoE)."""
        return 3 * (self.routed_hidden_size or self.hidden_size) * self.moe_intermediate_size

    @property
    def shared_expert_params(self) -> int:
        """Parameters of one shared expert (always at the full hidden width)."""
        return 3 * self.hidden_size * self.moe_intermediate_size

    def attention_params(self, layer: int) -> int:
        """Attention-block parameters of ``layer``: projections, norms, and the DSA indexer if it has one."""
        h = self.hidden_size
        if self.is_linear(layer):
            # KDA: fused q, k, v and output-gate projections, beta + the gate's low-rank down-projection,
            # its up-projection, the output projection; input and post-attention RMSNorm, output norm.
            width = self.linear_num_heads * self.linear_head_dim
            qkvg = h * 4 * width
            beta_fa = h * (self.linear_num_heads + self.linear_head_dim)
            return qkvg + beta_fa + self.linear_head_dim * width + width * h + 2 * h + width
        if self.attention == "gqa":
            qo = 2 * h * self.num_heads * self.head_dim
            kv = 2 * h * self.num_kv_heads * self.head_dim
            return qo + kv + 2 * h  # + input and post-attention RMSNorm
        assert self.kv_lora_rank is not None and self.qk_rope_head_dim is not None
        assert self.qk_nope_head_dim is not None and self.v_head_dim is not None
        qk_head = self.qk_nope_head_dim + self.qk_rope_head_dim
        if self.q_lora_rank is None:
            q = h * self.num_heads * qk_head
        else:  # q_a_proj, q_a_layernorm, q_b_proj
            q = h * self.q_lora_rank + self.q_lora_rank + self.q_lora_rank * self.num_heads * qk_head
        kv_a = h * (self.kv_lora_rank + self.qk_rope_head_dim) + self.kv_lora_rank  # + kv_a_layernorm
        kv_b = self.kv_lora_rank * self.num_heads * (self.qk_nope_head_dim + self.v_head_dim)
        o = self.num_heads * self.v_head_dim * h
        total = q + kv_a + kv_b + o + 2 * h
        if self.attention_output_gate:
            total += h * self.num_heads * self.v_head_dim
        if self.has_indexer(layer):
            # DeepSeek-V3.2 indexer: wq_b (q_lora -> heads*dim), wk (h -> dim), k_norm, weights_proj
            assert self.index_n_heads is not None and self.index_head_dim is not None
            q_in = self.q_lora_rank if self.q_lora_rank is not None else h
            total += q_in * self.index_n_heads * self.index_head_dim + h * self.index_head_dim
            total += 2 * self.index_head_dim + h * self.index_n_heads
        return total

    def layer_params(self, layer: int) -> tuple[float, float]:
        """(total weight params, active params per token) of decoder layer ``layer``.

        MoE active params = attention + shared experts + top-k routed experts + router.
        """
        if not 0 <= layer < self.num_layers:
            raise ValueError(f"layer {layer} out of range for {self.name} ({self.num_layers} layers)")
        attn = float(self.attention_params(layer))
        if not self.is_moe_layer(layer):
            ffn = 3.0 * self.hidden_size * self.intermediate_size
            return attn + ffn, attn + ffn
        router = float(self.hidden_size * self.n_routed_experts)
        shared = float(self.n_shared_experts * self.shared_expert_params)
        if self.routed_hidden_size is not None:  # latent down / up projections and the latent norm
            shared += 2.0 * self.hidden_size * self.routed_hidden_size + self.routed_hidden_size
        routed_total = float(self.n_routed_experts * self.expert_params)
        routed_active = float(self.experts_per_token * self.expert_params)
        return attn + router + shared + routed_total, attn + router + shared + routed_active

    def layer_weight_bytes(self, layer: int) -> float:
        """Bytes of decoder layer ``layer``'s weights as served: routed experts at ``expert_weight_bytes``
        (a checkpoint that quantizes them further than the rest), everything else at ``weight_bytes``."""
        total, _ = self.layer_params(layer)
        if self.expert_weight_bytes is None or not self.is_moe_layer(layer):
            return total * self.weight_bytes
        routed = float(self.n_routed_experts * self.expert_params)
        return (total - routed) * self.weight_bytes + routed * self.expert_weight_bytes


# meta-llama/Meta-Llama-3-8B config.json (https://huggingface.co/meta-llama/Meta-Llama-3-8B):
# num_hidden_layers 32, hidden_size 4096, num_attention_heads 32, num_key_value_heads 8,
# head_dim 4096/32 = 128, intermediate_size 14336, vocab_size 128256, max_position_embeddings 8192,
# torch_dtype bfloat16, tie_word_embeddings false.
_LLAMA_3_8B = ModelProfile(
    name="llama-3-8b", num_layers=32, hidden_size=4096, vocab_size=128256, num_heads=32,
    num_kv_heads=8, head_dim=128, attention="gqa", intermediate_size=14336,
    weight_bytes=2.0, kv_bytes=2.0, max_context=8192,
)

# ../shared/data/models/GLM-5.2.json (layer pattern from raw/zai-org--GLM-5.2_config.json "indexer_types").
# Weights fp8: served as zai-org/GLM-5.2-FP8 (the json's "source" cites the dynamo glm-5.2 recipe); the json's
# "dtype" bfloat16 is the training dtype. KV cache bf16, TensorRT-LLM's default for it (KV_DTYPES). The MTP layer
# (num_nextn_predict_layers 1) is not modelled.
_GLM_5_2 = ModelProfile(
    name="glm-5.2",
    num_layers=78,  # num_hidden_layers
    hidden_size=6144,  # hidden_size
    vocab_size=154880,  # vocab_size
    num_heads=64,  # num_attention_heads
    num_kv_heads=64,  # num_key_value_heads
    head_dim=192,  # head_dim
    attention="mla",  # "attention": MLA + DSA indexer
    intermediate_size=12288,  # intermediate_size (dense layers)
    weight_bytes=1.0,
    kv_bytes=2.0,
    max_context=1048576,  # max_position_embeddings
    q_lora_rank=2048,  # q_lora_rank
    kv_lora_rank=512,  # kv_lora_rank
    qk_nope_head_dim=192,  # qk_nope_head_dim
    qk_rope_head_dim=64,  # qk_rope_head_dim
    v_head_dim=256,  # v_head_dim
    n_routed_experts=256,  # n_routed_experts
    experts_per_token=8,  # num_experts_per_tok
    moe_intermediate_size=2048,  # moe_intermediate_size
    n_shared_experts=1,  # n_shared_experts
    first_k_dense=3,  # first_k_dense_replace (mlp_layer_types: 3 dense + 75 sparse)
    index_n_heads=32,  # index_n_heads
    index_head_dim=128,  # index_head_dim
    index_topk=2048,  # index_topk
    # indexer_types: "full" on layers 0-2, then every 4th layer (6, 10, ..., 74); 21 full + 57 shared.
    # Shared layers reuse the previous full layer's top-k and are assumed to hold no indexer weights.
    index_full_layers=frozenset([0, 1, 2, *range(6, 78, 4)]),
)

# ../shared/data/models/MiniMax-M2.7.json. "intermediate_size" 1536 is the per-expert size
# (every layer is MoE, num_local_experts 256, shared_intermediate_size 0). Weights fp8
# (quantization_config.quant_method fp8, block 128x128); KV cache bf16, TensorRT-LLM's default for it (KV_DTYPES).
_MINIMAX_M2_7 = ModelProfile(
    name="minimax-m2.7",
    num_layers=62,  # num_hidden_layers
    hidden_size=3072,  # hidden_size
    vocab_size=200064,  # vocab_size
    num_heads=48,  # num_attention_heads
    num_kv_heads=8,  # num_key_value_heads
    head_dim=128,  # head_dim
    attention="gqa",
    intermediate_size=1536,  # unused: no dense layers
    weight_bytes=1.0,
    kv_bytes=2.0,
    max_context=204800,  # max_position_embeddings
    n_routed_experts=256,  # num_local_experts
    experts_per_token=8,  # num_experts_per_tok
    moe_intermediate_size=1536,  # intermediate_size
    n_shared_experts=0,  # shared_intermediate_size 0
    first_k_dense=0,
)

# ../shared/data/models/Kimi-K3.json (text_config; the config aiconfigurator ships,
# moonshotai--Kimi-K3_config.json, lists the same layers 1-based as linear_attn_config.kda_layers).
# linear_attn_config.full_attn_layers is 1-based: MLA on 4, 8, ..., 92 and 93 (24 layers), KDA on the other 69.
# Served as the checkpoint is quantized (aiconfigurator 0.12.0 utils.parse_compressed_tensors_quant of its
# compressed-tensors "mxfp4-pack-quantized", group 32, whose ignore list keeps attention, shared experts, the
# dense MLP and the LM head unquantized): routed experts MXFP4 - 4-bit E2M1 values plus one 8-bit E8M0 scale per
# 32 (OCP Microscaling Formats v1.0), 4.25 bits = 0.53125 bytes a weight - and everything else bf16. KV cache
# bf16: the checkpoint declares no kv_cache_scheme, so TensorRT-LLM's "auto" keeps the model dtype (KV_DTYPES).
_KIMI_K3_FULL_ATTENTION = frozenset(i - 1 for i in (*range(4, 93, 4), 93))
_KIMI_K3 = ModelProfile(
    name="kimi-k3",
    num_layers=93,  # num_hidden_layers
    hidden_size=7168,  # hidden_size
    vocab_size=163840,  # vocab_size
    num_heads=96,  # num_attention_heads
    num_kv_heads=96,  # num_key_value_heads
    head_dim=128,  # v_head_dim (and linear_attn_config.head_dim); MLA's q/k heads are qk_nope + qk_rope
    attention="mla",  # on the full-attention layers
    intermediate_size=33792,  # intermediate_size (the one dense layer)
    weight_bytes=2.0,
    kv_bytes=2.0,
    max_context=1048576,  # max_position_embeddings
    q_lora_rank=1536,  # q_lora_rank
    kv_lora_rank=512,  # kv_lora_rank
    qk_nope_head_dim=128,  # qk_nope_head_dim
    qk_rope_head_dim=64,  # qk_rope_head_dim
    v_head_dim=128,  # v_head_dim
    n_routed_experts=896,  # num_experts
    experts_per_token=16,  # num_experts_per_token
    moe_intermediate_size=3072,  # moe_intermediate_size
    n_shared_experts=2,  # num_shared_experts
    first_k_dense=1,  # first_k_dense_replace
    attention_output_gate=True,  # mla_use_output_gate
    linear_layers=frozenset(range(93)) - _KIMI_K3_FULL_ATTENTION,  # linear_attn_config: 69 KDA layers
    linear_num_heads=96,  # linear_attn_config.num_heads
    linear_head_dim=128,  # linear_attn_config.head_dim
    linear_conv_kernel=4,  # linear_attn_config.short_conv_kernel_size
    routed_hidden_size=3584,  # routed_expert_hidden_size (latent_moe_use_norm: a norm in the latent)
    expert_weight_bytes=4.25 / 8,
)

MODELS: dict[str, ModelProfile] = {m.name: m for m in (_LLAMA_3_8B, _GLM_5_2, _MINIMAX_M2_7, _KIMI_K3)}

def get_model(name: str) -> ModelProfile:
    """The model profile called ``name``; ValueError naming the known models otherwise."""
    try:
        return MODELS[name]
    except KeyError:
        raise ValueError(f"unknown model {name!r} (known: {', '.join(sorted(MODELS))})") from None


def split_layers(num_layers: int, pp: int) -> list[range]:
    """Contiguous layer ranges for ``pp`` stages, as even as possible; earlier stages get the extra layer."""
    if pp < 1 or pp > num_layers:
        raise ValueError(f"pp must be in [1, {num_layers}] for {num_layers} layers, got {pp}")
    base, extra = divmod(num_layers, pp)
    ranges: list[range] = []
    start = 0
    for stage in range(pp):
        end = start + base + (1 if stage < extra else 0)
        ranges.append(range(start, end))
        start = end
    return ranges
