"""Table prices of a hybrid model's layers (Kimi-K3): Kimi Delta Attention, MLA in TensorRT-LLM's granular
form, and a latent MoE - the parts :mod:`table_cost` does not price for the GQA and DSA models.

==========================  =========================================================================
KDA projections             bf16 ``gemm``: fused q/k/v/output-gate (``4 · H·d / tp`` outputs), beta and the
                            gate's low-rank down-projection (``H + d``, unsplit), its up-projection, the
                            output projection; the output norm a memory op (aiconfigurator 0.12.0
                            ``sdk/models/kimi_k3.py`` builds the same ops)
KDA kernel and short conv   TensorRT-LLM's measured gated-delta-net kernels (``gdn_perf``,
                            ``chunk_gated_delta_rule`` and ``causal_conv1d_fn``, Qwen3.5 shapes), carried to
                            KDA's shape by the speed-of-light ratio (below); per chunk shape ``(x, batch)``,
                            the cached prefix costs nothing (the state is carried in)
MLA                         ``context_mla_perf`` at the full length ``L + x`` times the prefix correction
                            (FORMAT §6), the q/kv down-projection (unsplit), ``q_b``, ``o`` and the output
                            gate on the new tokens, and ``kv_b`` over the new *and the cached* tokens
latent MoE                  bf16 router, latent down / up projections (unsplit) and the latent norm, the
                            shared experts split over TP, and the routed experts from a measured curve of
                            this exact shape (``data/kimi_k3_moe_b300.csv``)
==========================  =========================================================================

Why the gated-delta-net table: it is the only linear-attention kernel TensorRT-LLM's tables measure, and it is
the same algorithm - the chunked delta rule over a ``d x d`` state per head, chunks of 64 tokens - that KDA
runs. What differs: KDA decays the state per channel (a ``d``-vector gate per head and token) where
gated-delta-net decays it per head (a scalar), and Kimi-K3 has as many key heads as value heads (48 each on
a TP-2 stage) where Qwen3.5 shares 16 key heads among 16-64 value heads. The row with as many value heads as
the stage holds (the state's size) is scaled by SOL(KDA) / SOL(GDN) at the same tokens: the extra q/k
traffic and the per-channel gate's bytes and FLOPs (:func:`delta_rule_sol`). aiconfigurator has no TRT-LLM
KDA table either and prices the kernel at its speed of light alone (``KdaOp`` falls back to ``Source::Sol``);
its SGLang collection measured ``chunk_kda`` itself, which the estimator test compares with ours.

Why ``kv_b`` over the cached tokens: after a cached prefix TensorRT-LLM's MLA reads the prefix's latents back
from the pool and up-projects all of them (``modules/attention.py`` ``MLA.forward_context_with_cached_kv`` and,
on Blackwell, ``forward_context_with_chunked_prefill``: ``kv_b_proj`` of ``num_ctx_cached_tokens +
num_ctx_tokens`` latents) - DESIGN §2's ``γ·L`` term. aiconfigurator charges ``kv_b`` on the new tokens only.

Why that MoE curve: TensorRT-LLM's tables hold no 896-expert shape (their MXFP4 rows are gpt-oss's and two
DeepSeek-V4 shapes); aiconfigurator's SGLang collection on B300 measured this exact shape with
``sglang_flashinfer_trtllm_moe`` - FlashInfer's binding of TensorRT-LLM's own trtllm-gen fused-MoE kernel -
with MXFP4 weights and MXFP8 activations, the Blackwell path (aiconfigurator ``helpers.py``
``resolve_kimi_k3_moe_arch_mode``). Routing skew ``power_law_1.01``, aiconfigurator's for Kimi-K3.
"""

from __future__ import annotations

import csv
from collections.abc import Callable
from pathlib import Path

from wavepp.runtime.engines.sim.perf_interp import ContextGrid, Curve, GemmTable, GridPoint, TableCoverageError
from wavepp.runtime.engines.sim.perf_tables import PerfTables
from wavepp.runtime.engines.sim.profiles import HardwareProfile, ModelProfile

MS = 1e-3
ACT_BYTES = 2
FLA_CHUNK = 64                      # chunk length of the chunked delta-rule kernels (FLA, TensorRT-LLM)
GDN_KEY_HEADS = 16                  # every gdn_perf row's num_k_heads (Qwen3.5)
MOE_DATA = Path(__file__).with_name("data") / "kimi_k3_moe_b300.csv"
MOE_DTYPE = "w4a8_mxfp4_mxfp8"
MOE_DISTRIBUTION = "power_law_1.01"


def delta_rule_sol(hw: HardwareProfile, key_heads: float, value_heads: float, dim: int, seq: float,
                   batch: float, channel_gate: bool) -> float:
    """Speed-of-light seconds of a chunked delta-rule forward over ``batch`` sequences of ``seq`` tokens.

    Bytes: q and k per key head, v and the output per value head (bf16), beta and the gate (fp32; a scalar per
    value head, or a ``dim``-vector with ``channel_gate``), and the ``dim x dim`` fp32 state written and read at
    every chunk boundary. FLOPs per token and value head: ``6·dim²`` for the state (read by q, corrected by k,
    updated by the outer product) and ``6·C·dim`` within the chunk (scores, values, the WY transform), plus
    ``2·C·dim`` to apply a per-channel decay.
    """
    tokens = seq * batch
    gate = dim if channel_gate else 1
    act = tokens * (2 * key_heads * dim + 2 * value_heads * dim) * ACT_BYTES
    act += tokens * value_heads * (1 + gate) * 4
    states = batch * (seq // FLA_CHUNK + 1) * value_heads * dim * dim * 4 * 2
    flops = tokens * value_heads * (6 * dim * dim + (8 if channel_gate else 6) * FLA_CHUNK * dim)
    return max(flops / hw.dense_flops, (act + states) / hw.hbm_bytes_per_s)


class HybridOps:
    """The per-layer prices of a hybrid model's stage of ``tp`` GPUs (the routed experts over ``tp`` as EP)."""

    def __init__(self, model: ModelProfile, hw: HardwareProfile, tp: int, tables: PerfTables, gemm: GemmTable,
                 memory_op: Callable[[float], float], kv_dtype: str) -> None:
        self.model, self.hw, self.tp, self._gemm, self._memory_op = model, hw, tp, gemm, memory_op
        if model.linear_num_heads % tp:
            raise TableCoverageError(f"{model.name}'s {model.linear_num_heads} linear heads do not split over {tp}")
        self.heads = model.linear_num_heads // tp
        self._kda, self._gdn_heads = self._gdn_grid(tables, "chunk_gated_delta_rule")
        self._conv, _ = self._gdn_grid(tables, "causal_conv1d_fn")
        self._mla = self._mla_grid(tables, kv_dtype)
        self.moe = self._moe_curve()

    # ---- tables -------------------------------------------------------------------------------------
    def _gdn_grid(self, tables: PerfTables, kernel: str) -> tuple[ContextGrid, int]:
        """The kernel's context rows at the value-head count nearest the stage's (the largest model of it)."""
        cols = tables.read("gdn_perf", {"phase": "context", "kernel_source": kernel, "num_k_heads": GDN_KEY_HEADS},
                           ["num_v_heads", "d_model", "seq_len", "batch_size", "latency"])
        heads = min(set(cols["num_v_heads"]), key=lambda v: (abs(v - self.heads), -v))
        width = max(d for v, d in zip(cols["num_v_heads"], cols["d_model"], strict=True) if v == heads)
        points: dict[GridPoint, float] = {}
        for v, d, s, b, lat in zip(cols["num_v_heads"], cols["d_model"], cols["seq_len"], cols["batch_size"],
                                   cols["latency"], strict=True):
            if v == heads and d == width:
                points[(s, b)] = lat * MS
        dim = self.model.linear_head_dim

        def sol(seq: float, batch: float) -> float:
            return delta_rule_sol(self.hw, GDN_KEY_HEADS, heads, dim, seq, batch, channel_gate=False)

        return ContextGrid(points, sol, sqrt_axis=None), heads

    def _mla_grid(self, tables: PerfTables, kv_dtype: str) -> ContextGrid:
        kv = "bfloat16" if kv_dtype == "bf16" else "fp8"
        cols = tables.read("context_mla_perf", {"mla_dtype": "bfloat16", "kv_cache_dtype": kv},
                           ["num_heads", "isl", "batch_size", "latency"])
        points: dict[GridPoint, float] = {(h, s, b): v * MS for h, s, b, v in
                                          zip(cols["num_heads"], cols["isl"], cols["batch_size"], cols["latency"],
                                              strict=True)}
        return ContextGrid(points, self._mla_sol, sqrt_axis=1)

    def _mla_sol(self, heads: float, seq: float, batch: float) -> float:
        """Causal MLA attention in its expanded (MHA) form: q·k over qk_nope + rope dims, p·v over v dims."""
        m, hw = self.model, self.hw
        assert m.qk_nope_head_dim is not None and m.qk_rope_head_dim is not None and m.v_head_dim is not None
        qk, v = m.qk_nope_head_dim + m.qk_rope_head_dim, m.v_head_dim
        compute = batch * seq * seq * heads * (qk + v) / hw.dense_flops
        memory = batch * seq * heads * (2 * qk + 2 * v) * ACT_BYTES / hw.hbm_bytes_per_s
        return max(compute, memory)

    def _moe_curve(self) -> Curve:
        m, hw, ep = self.model, self.hw, self.tp
        if (m.n_routed_experts, m.experts_per_token, m.routed_hidden_size, m.moe_intermediate_size) != (
                896, 16, 3584, 3072):
            raise TableCoverageError(f"no measured MoE curve for {m.name}'s routed experts")
        if hw.name != "b300":
            raise TableCoverageError(f"the Kimi-K3 MoE curve was measured on B300, not {hw.name}")
        xs, ys = [], []
        with MOE_DATA.open() as f:
            for row in csv.DictReader(line for line in f if not line.startswith("#")):
                if (row["moe_dtype"], row["distribution"], int(row["moe_ep_size"])) == (MOE_DTYPE, MOE_DISTRIBUTION,
                                                                                       ep):
                    xs.append(float(row["num_tokens"]))
                    ys.append(float(row["latency"]) * MS)
        if not xs:
            raise TableCoverageError(f"no measured Kimi-K3 MoE rows at expert parallelism {ep}")
        width = m.routed_hidden_size or m.hidden_size
        expert_bytes = 3.0 * width * m.moe_intermediate_size * 0.5
        local = m.n_routed_experts / ep

        def sol(tokens: float) -> float:  # FORMAT §5 MoE roofline at fp8 activations, 4-bit weights
            flops = tokens * m.experts_per_token * width * m.moe_intermediate_size * 6.0 / ep
            touched = min(local, tokens * m.experts_per_token)
            return max(flops / hw.fp8_flops, touched * expert_bytes / hw.hbm_bytes_per_s)

        return Curve(xs, ys, sol)

    # ---- per layer ----------------------------------------------------------------------------------
    def kda_token_ops(self, x: int) -> float:
        """A KDA layer's projections and output norm for ``x`` new tokens."""
        m, g, h = self.model, self._gemm, self.model.hidden_size
        width = self.heads * m.linear_head_dim
        t = g(x, 4 * width, h) + g(x, m.linear_num_heads + m.linear_head_dim, h)
        t += g(x, width, m.linear_head_dim) + g(x, h, width)
        return t + self._memory_op(2 * width * ACT_BYTES * x)

    def kda_chunk_ops(self, new: int, batch: int) -> float:
        """The delta-rule kernel and the short convs for ``batch`` chunks of ``new`` tokens."""
        return self.kda_kernel(new, batch) + self.kda_conv(new, batch)

    def kda_kernel(self, new: int, batch: int) -> float:
        d = self.model.linear_head_dim
        scale = (delta_rule_sol(self.hw, self.heads, self.heads, d, new, batch, channel_gate=True)
                 / delta_rule_sol(self.hw, GDN_KEY_HEADS, self._gdn_heads, d, new, batch, channel_gate=False))
        return self._kda(new, batch) * scale

    def kda_conv(self, new: int, batch: int) -> float:
        """The short convs over q, k and v: GDN's one conv over its q, k, v channels, scaled to KDA's (memory
        bound: bytes grow with the channels)."""
        d = self.model.linear_head_dim
        channels = (2 * GDN_KEY_HEADS + self._gdn_heads) * d
        return self._conv(new, batch) * 3 * self.heads * d / channels

    def mla_token_ops(self, x: int) -> float:
        """An MLA layer's projections on ``x`` new tokens: q/kv down (unsplit), q_b, o and the output gate."""
        m, g, h, tp = self.model, self._gemm, self.model.hidden_size, self.tp
        assert m.q_lora_rank is not None and m.kv_lora_rank is not None and m.qk_rope_head_dim is not None
        assert m.qk_nope_head_dim is not None and m.v_head_dim is not None
        heads = m.num_heads // tp
        t = g(x, m.q_lora_rank + m.kv_lora_rank + m.qk_rope_head_dim, h)
        t += g(x, heads * (m.qk_nope_head_dim + m.qk_rope_head_dim), m.q_lora_rank)
        t += g(x, h, heads * m.v_head_dim)
        if m.attention_output_gate:
            t += g(x, heads * m.v_head_dim, h) + self._memory_op(2 * heads * m.v_head_dim * ACT_BYTES * x)
        return t

    def mla_kv_up(self, tokens: int) -> float:
        """``kv_b`` up-projection of ``tokens`` latents (the new ones and, after a prefix, the cached ones)."""
        m = self.model
        assert m.kv_lora_rank is not None and m.qk_nope_head_dim is not None and m.v_head_dim is not None
        return self._gemm(tokens, m.num_heads // self.tp * (m.qk_nope_head_dim + m.v_head_dim), m.kv_lora_rank)

    def mla_attention(self, cached: int, new: int, batch: int) -> float:
        full = cached + new
        return self._mla(self.model.num_heads // self.tp, full, batch) * (full * full - cached * cached) / (full * full)

    def latent_moe(self, x: int, shared_ffn: Callable[[int, int, int], float]) -> float:
        """Router, latent down, routed experts, latent up, shared experts (``shared_ffn(x, inter, tp)``)."""
        m, h = self.model, self.model.hidden_size
        assert m.routed_hidden_size is not None
        r = m.routed_hidden_size
        t = self._gemm(x, m.n_routed_experts, h) + self._gemm(x, r, h) + self._memory_op(2 * r * ACT_BYTES * x)
        t += self.moe(x) + self._gemm(x, h, r)
        return t + shared_ffn(x, m.n_shared_experts * m.moe_intermediate_size, self.tp)
