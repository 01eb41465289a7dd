"""Table cost model: a stage's step time as the sum of measured TensorRT-LLM kernel latencies.

A wave on a stage of ``tp`` GPUs (tensor parallel; the routed experts expert-parallel over the same GPUs)
costs, per decoder layer, what aiconfigurator's context step charges (../shared/data/perf/FORMAT.md §6),
each op looked up in its table and interpolated as FORMAT §5 says (:mod:`perf_interp`):

========================  ===========================================================================
add_norm x2 (, act_gate)  memory-op formula ``bytes / (0.8 · mem_bw) + 3 µs``; 8h bytes per token each
attention (GQA)           ``gemm`` qkv and proj, ``context_attention_perf`` at the full length ``L + x``
                          times the prefix correction ``((L+x)² − L²) / (L+x)²``, plus the fused
                          RoPE / KV-write / QK-norm extras (1.1 × their op latencies)
attention (MLA + DSA)     ``dsa_context_module_perf`` (projections, indexer, sparse attention in one
                          module) at the ``x`` new tokens for the exact prefix ``L`` (the table's
                          ``step`` axis), as the kernel runs a chunk; no prefix correction
dense FFN                 ``gemm`` gate/up and down
MoE FFN                   ``gemm`` bf16 router, shared-expert ``gemm``s, ``moe_perf`` over the wave's
                          tokens at the model's routing distribution
TP collectives            ``custom_allreduce_perf`` (TensorRT-LLM's all-reduce kernel), after the
                          attention and after the FFN, ``x · h`` elements; none when ``tp == 1``
========================  ===========================================================================

plus the embedding gather (memory op) on the first stage and the bf16 LM-head ``gemm`` (one row per chunk)
on the last. The inter-stage send is TensorRT-LLM's: hidden states and residual, two ``x · h`` bf16 tensors,
each one NCCL send of ``p2p_latency`` + bytes over the node's NVLink (:func:`costmodel.activation_send_time`;
FORMAT §6's ``context_p2p`` charges one tensor over the inter-node link).
Ops are summed serially and nothing is added for launches (FORMAT §6-7: the tables were timed under CUDA
graphs and TensorRT-LLM's static context time has no fixed overhead).

A hybrid model's layers (Kimi-K3: Kimi Delta Attention, TensorRT-LLM's granular MLA, a latent MoE) are
priced by :mod:`hybrid_ops`.

The choices the tables do not make for us - where TensorRT-LLM's code and aiconfigurator's model of it
part - are stated, with their sources, in :mod:`table_choices`.
"""

from __future__ import annotations

import functools
import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from wavepp.runtime.engines.sim.costmodel import ChunkShape, activation_send_time
from wavepp.runtime.engines.sim.hybrid_ops import HybridOps
from wavepp.runtime.engines.sim.perf_interp import ContextGrid, Curve, GemmTable, GridPoint, TableCoverageError
from wavepp.runtime.engines.sim.perf_tables import PerfTables, default_perf_dir
from wavepp.runtime.engines.sim.profiles import (
    DEFAULT_KV_DTYPE,
    HardwareProfile,
    ModelProfile,
    get_hardware,
    get_model,
    split_layers,
)
from wavepp.runtime.engines.sim.table_choices import FP8_BLOCK, SPECS, TRTLLM, Choices
from wavepp.runtime.engines.sim.table_sol import dsa_sol, gemm_sol, gqa_sol

# Distinct (kind, cached, new, batch) shapes whose attention time is remembered (a pure function of the
# shape; bounded, so a long replay's memory does not grow with it - as the executor's STEP_MEMO).
ATTENTION_MEMO = 1 << 16
MS = 1e-3  # table latencies are milliseconds (FORMAT §3)
ACT_BYTES = 2  # bf16 activations
# FORMAT §6: add_norm reads and writes 2h bf16 values per token (the residual and the normed input).
ADD_NORM_BYTES_PER_HIDDEN = 8
# FORMAT §6 "Fused extras": priced as memory ops whose bytes scale with the head size, not the tokens
# (about 13 µs per layer in all), summed and multiplied by 1.1. We charge their fixed latencies only.
EXTRAS_FACTOR = 1.1


def load_table_cost_model(model: str, hardware: str, pp: int, gpus_per_stage: int,
                          perf_dir: str | Path | None = None, choices: Choices = TRTLLM,
                          kv_dtype: str = DEFAULT_KV_DTYPE) -> TableCostModel:
    """The table model for these settings; built once per process (reading the tables takes ~0.1 s)."""
    root = Path(perf_dir) if perf_dir is not None else default_perf_dir()
    return _load(model, hardware, pp, gpus_per_stage, str(root.resolve()), choices, kv_dtype)


@functools.lru_cache(maxsize=8)
def _load(model: str, hardware: str, pp: int, gpus_per_stage: int, perf_dir: str, choices: Choices,
          kv_dtype: str) -> TableCostModel:
    profile = get_model(model).with_kv_dtype(kv_dtype)
    return TableCostModel(profile, get_hardware(hardware), pp, gpus_per_stage, perf_dir, choices)


class _Kind(NamedTuple):
    """Layers that cost the same: MoE or dense FFN, computing the DSA indexer or reusing it. A tuple: it keys
    every price memo, and a dataclass's hash is a Python call (~290K of them a Mooncake replay)."""

    moe: bool
    indexer: bool
    linear: bool = False        # a hybrid model's recurrent-state (KDA) layer


@dataclass(frozen=True, slots=True)
class _StagePlan:
    layers: range
    kinds: tuple[tuple[_Kind, int], ...]  # (kind, number of layers of that kind)
    is_first: bool
    is_last: bool


class TableCostModel:
    """``CostModel`` of ``model`` split into ``pp`` stages of ``tp`` GPUs each, from the kernel tables."""

    def __init__(self, model: ModelProfile, hardware: HardwareProfile, pp: int, gpus_per_stage: int = 1,
                 perf_dir: str | Path | None = None, choices: Choices = TRTLLM) -> None:
        spec = SPECS.get(model.name)
        if spec is None:
            raise TableCoverageError(f"no kernel tables for model {model.name!r} (tables: {', '.join(SPECS)})")
        tp = gpus_per_stage
        if model.num_heads % tp or (model.attention == "gqa" and model.num_kv_heads % tp and tp % model.num_kv_heads):
            raise TableCoverageError(f"{model.name}'s heads do not split over {tp} GPUs")
        self.model, self.hardware, self.spec, self.tp, self.choices = model, hardware, spec, tp, choices
        # The rooflines the measured utilisation is carried through (table_sol); only their ratios count.
        self._gqa_sol = functools.partial(gqa_sol, model, hardware, self._kv_heads)
        self._dsa_sol = functools.partial(dsa_sol, model, hardware, self._dsa_gemm)
        tables = PerfTables(perf_dir, hardware.name)
        self.system = tables.system
        self._gemm = self._gemm_table(tables, spec.gemm_dtype)
        self._gemm_bf16 = self._gemm_table(tables, "bfloat16")
        self._allreduce = self._allreduce_curve(tables) if tp > 1 else None
        self._hybrid: HybridOps | None = None
        if spec.hybrid:
            self._hybrid = HybridOps(model, hardware, tp, tables, self._gemm, self._memory_op, model.kv_dtype)
            self._moe: Curve | None = self._hybrid.moe
        else:
            self._moe = self._moe_curve(tables) if model.n_routed_experts else None
            self._attention = self._attention_grid(tables)
        ranges = split_layers(model.num_layers, pp)
        self._stages = tuple(self._plan(r, s == 0, s == pp - 1) for s, r in enumerate(ranges))
        self._token_cache: dict[tuple[_Kind, int], float] = {}
        self._attn_cache: dict[tuple[_Kind, int, int, int], float] = {}
        self._head_cache: dict[int, float] = {}

    # ---- tables -------------------------------------------------------------------------------------

    def _gemm_table(self, tables: PerfTables, dtype: str) -> GemmTable:
        cols = tables.read("gemm_perf", {"gemm_dtype": dtype}, ["m", "n", "k", "latency"])
        rows = zip(cols["m"], cols["n"], cols["k"], (v * MS for v in cols["latency"]), strict=True)
        return GemmTable(rows, gemm_sol(self.hardware, dtype))

    def _moe_curve(self, tables: PerfTables) -> Curve:
        m, hw = self.model, self.hardware
        where = {"moe_dtype": self.spec.gemm_dtype, "distribution": self.spec.moe_distribution,
                 "topk": m.experts_per_token, "num_experts": m.n_routed_experts, "hidden_size": m.hidden_size,
                 "inter_size": m.moe_intermediate_size, "moe_tp_size": 1, "moe_ep_size": self.tp}
        cols = tables.read("moe_perf", where, ["num_tokens", "latency"])
        expert_bytes = 3.0 * m.hidden_size * m.moe_intermediate_size * m.weight_bytes
        local_experts = m.n_routed_experts / self.tp

        def sol(tokens: float) -> float:  # FORMAT §5 MoE roofline: routed FLOPs vs expert weights touched
            flops = tokens * m.experts_per_token * m.hidden_size * m.moe_intermediate_size * 6.0 / self.tp
            touched = min(local_experts, tokens * m.experts_per_token)
            return max(flops / hw.fp8_flops, touched * expert_bytes / hw.hbm_bytes_per_s)

        return Curve(cols["num_tokens"], [v * MS for v in cols["latency"]], sol)

    def _allreduce_curve(self, tables: PerfTables) -> Curve:
        if self.tp > self.hardware.gpus_per_node:
            raise TableCoverageError(f"all-reduce over {self.tp} GPUs spans nodes; the tables hold one node")
        if self.choices.comm == "nccl":          # NCCL's all_reduce of bf16 ("half") elements (FORMAT §4)
            cols = tables.read_nccl({"op_name": "all_reduce", "nccl_dtype": "half", "num_gpus": self.tp},
                                    ["message_size", "latency"])
            return Curve(cols["message_size"], [v * MS for v in cols["latency"]], lambda size: size)
        cols = tables.read("custom_allreduce_perf", {"allreduce_dtype": "bfloat16", "num_gpus": self.tp},
                           ["message_size", "latency", "kernel_source"])
        # FORMAT §3: rows timed outside a CUDA graph (kernel_source "*_eager") are not used.
        rows = [(n, v * MS) for n, v, src in zip(cols["message_size"], cols["latency"], cols["kernel_source"],
                                                  strict=True) if not src.endswith("_eager")]
        return Curve([n for n, _ in rows], [v for _, v in rows], lambda size: size)  # comm SOL: size (FORMAT §5.5)

    def _attention_grid(self, tables: PerfTables) -> ContextGrid:
        m = self.model
        # The KV dtype's rows: bf16 compute with a bf16 or an fp8 cache (the tables' attn_dtype / mla_dtype
        # bfloat16), so that only the cache changes with the deployment's kv_dtype.
        kv = "bfloat16" if m.kv_dtype == "bf16" else "fp8"
        if self.spec.dsa_module is not None:
            where: dict[str, object] = {"model": self.spec.dsa_module, "mla_dtype": "bfloat16",
                                        "kv_cache_dtype": kv, "gemm_type": self._dsa_gemm}
            columns = ["num_heads", "step", "isl", "batch_size", "latency"]
            try:
                cols = tables.read("dsa_context_module_perf", where, columns)
            except TableCoverageError:
                if kv == "bfloat16":
                    raise
                # H200's DSA table was collected with a bf16 cache only: its rows stand in for fp8 (on B300 the
                # fp8 rows are 2-20% faster, so this errs slow).
                cols = tables.read("dsa_context_module_perf", where | {"kv_cache_dtype": "bfloat16"}, columns)
            # (heads, prefix, new tokens, batch); raw latency on every axis, as aic-core resolves this table
            # (perf_database/dsa.rs: OpInterpConfig::grid, not the sqrt-along-seq config).
            dsa_points: dict[GridPoint, float] = {(h, p, s, b): v * MS for h, p, s, b, v in
                                                  zip(cols["num_heads"], cols["step"], cols["isl"],
                                                      cols["batch_size"], cols["latency"], strict=True)}
            return ContextGrid(dsa_points, self._dsa_sol, sqrt_axis=None)
        where = {"num_key_value_heads": self._kv_heads, "head_dim": m.head_dim, "window_size": 0,
                 "attn_dtype": "bfloat16", "kv_cache_dtype": kv}
        cols = tables.read("context_attention_perf", where, ["num_heads", "isl", "batch_size", "latency"])
        points: dict[GridPoint, float] = {(h, s, b): v * MS for h, s, b, v in
                                          zip(cols["num_heads"], cols["isl"], cols["batch_size"], cols["latency"],
                                              strict=True)}
        return ContextGrid(points, self._gqa_sol, sqrt_axis=1)

    @property
    def _dsa_gemm(self) -> str:
        return self.choices.dsa_gemm_type or self.spec.gemm_dtype

    @property
    def _heads(self) -> int:
        return self.model.num_heads // self.tp

    @property
    def _kv_heads(self) -> int:
        return math.ceil(self.model.num_kv_heads / self.tp)

    # ---- per-layer op prices --------------------------------------------------------------------------

    def _memory_op(self, nbytes: float) -> float:
        """FORMAT §6 element-wise op: bytes / (0.8 · mem_bw) + the constant latency."""
        hw = self.hardware
        return nbytes / (hw.hbm_bytes_per_s * hw.hbm_efficiency) + hw.op_latency_s

    def _token_ops(self, kind: _Kind, x: int) -> float:
        """Seconds of one layer's ops that depend only on the wave's ``x`` new tokens."""
        key = (kind, x)
        cached = self._token_cache.get(key)
        if cached is not None:
            return cached
        m, tp, h = self.model, self.tp, self.model.hidden_size
        gemm = self._gemm
        t = 2 * self._memory_op(ADD_NORM_BYTES_PER_HIDDEN * h * x)  # add_norm_1, add_norm_2
        if self._allreduce is not None:
            t += 2 * self._allreduce(x * h)  # ar_1 after attention, ar_2 after the FFN / MoE combine
        hybrid = self._hybrid
        if hybrid is not None:
            t += hybrid.kda_token_ops(x) if kind.linear else hybrid.mla_token_ops(x)
        elif m.attention == "gqa":
            qkv = m.num_heads * m.head_dim // tp + 2 * m.head_dim * self._kv_heads
            t += gemm(x, qkv, h) + gemm(x, h, m.num_heads * m.head_dim // tp)
        if kind.moe and hybrid is not None:
            t += hybrid.latent_moe(x, self._ffn)
        elif kind.moe:
            assert self._moe is not None
            t += self._gemm_bf16(x, m.n_routed_experts, h) + self._moe(x)  # router, routed experts
            if m.n_shared_experts:
                inter = m.n_shared_experts * m.moe_intermediate_size
                # TensorRT-LLM Deepseekv3MoE._compute_shared_expert_tp_size: gcd(inter // 128-wide scale blocks,
                # tp_size); aiconfigurator's DeepSeek-V3.2 model: moe_tp_size, 1 under EP.
                shared_tp = math.gcd(inter // FP8_BLOCK, tp) if self.choices.shared_expert_tp else 1
                t += self._ffn(x, inter, shared_tp)
        else:
            t += self._ffn(x, m.intermediate_size, tp)
        self._token_cache[key] = t
        return t

    def _ffn(self, x: int, inter: int, tp: int) -> float:
        """SwiGLU FFN sharded over ``tp`` GPUs: gate/up GEMM, act_gate memory op, down GEMM (FORMAT §6)."""
        local, h = inter // tp, self.model.hidden_size
        act = self._memory_op(3 * local * ACT_BYTES * x)  # reads gate and up, writes their product
        return self._gemm(x, 2 * local, h) + act + self._gemm(x, h, local)

    def _attention_op(self, kind: _Kind, cached: int, new: int, batch: int) -> float:
        """Seconds of one layer's attention for ``batch`` chunks of ``new`` tokens after ``cached``."""
        key = (kind, cached, new, batch)
        hit = self._attn_cache.get(key)
        if hit is not None:
            return hit
        heads = self._heads
        if self._hybrid is not None:
            t = (self._hybrid.kda_chunk_ops(new, batch) if kind.linear
                 else self._hybrid.mla_attention(cached, new, batch))
        elif self.spec.dsa_module is not None:  # the new tokens' row at the exact prefix
            t = self._attention(heads, cached, new, batch)
            if not kind.indexer:  # reuses the indexer: its share is not run
                t *= self._dsa_sol(heads, cached, new, batch, indexer=False) / self._dsa_sol(heads, cached, new, batch)
        else:
            full = cached + new
            t = self._attention(heads, full, batch) * (full * full - cached * cached) / (full * full)  # FORMAT §6
        if len(self._attn_cache) >= ATTENTION_MEMO:
            self._attn_cache.clear()
        self._attn_cache[key] = t
        return t

    # ---- CostModel ----------------------------------------------------------------------------------

    def _plan(self, layers: range, is_first: bool, is_last: bool) -> _StagePlan:
        m = self.model
        every = not m.index_full_layers or not self.choices.indexer_reuse  # every layer computes the indexer
        counts = Counter(_Kind(m.is_moe_layer(i), every or m.has_indexer(i), m.is_linear(i)) for i in layers)
        return _StagePlan(layers, tuple(counts.items()), is_first, is_last)

    @property
    def num_stages(self) -> int:
        """Number of pipeline stages."""
        return len(self._stages)

    def stage_layers(self, stage: int) -> range:
        """Decoder layers held by ``stage``."""
        return self._stage(stage).layers

    def step_time(self, stage: int, chunks: Sequence[ChunkShape]) -> float:
        """Seconds for ``stage`` to run one wave; 0.0 for an empty wave (nothing is launched)."""
        plan = self._stage(stage)
        if not chunks:
            return 0.0
        return self._stage_total(plan, self._layer_times(chunks, [kind for kind, _ in plan.kinds]), chunks)

    def step_times(self, chunks: Sequence[ChunkShape]) -> list[float]:
        """:meth:`step_time` on every stage, each kind of layer priced once for all of them (a planner
        prices a wave on every stage; the stages' layers are of a few kinds)."""
        if not chunks:
            return [0.0] * len(self._stages)
        kinds = list(dict.fromkeys(kind for plan in self._stages for kind, _ in plan.kinds))
        layers = self._layer_times(chunks, kinds)
        return [self._stage_total(plan, layers, chunks) for plan in self._stages]

    def _layer_times(self, chunks: Sequence[ChunkShape], kinds: list[_Kind]) -> dict[_Kind, float]:
        """Seconds of one layer of each of ``kinds`` running the wave."""
        x = sum(c.tokens for c in chunks)
        shapes = Counter((c.context, c.tokens) for c in chunks)
        extras = EXTRAS_FACTOR * self.spec.attention_extras * self.hardware.op_latency_s
        out: dict[_Kind, float] = {}
        for kind in kinds:
            layer = self._token_ops(kind, x) + extras
            for (cached, new), batch in shapes.items():
                layer += self._attention_op(kind, cached, new, batch)
            if self._hybrid is not None and not kind.linear:   # MLA's kv_b over new and cached latents
                layer += self._hybrid.mla_kv_up(x + sum(c.context for c in chunks))
            out[kind] = layer
        return out

    def _stage_total(self, plan: _StagePlan, layers: dict[_Kind, float], chunks: Sequence[ChunkShape]) -> float:
        """The stage's step: its layers, in its kinds' order, then the embedding or the LM head it holds."""
        total = 0.0
        for kind, count in plan.kinds:
            total += count * layers[kind]
        if plan.is_first:  # embedding gather
            total += self._memory_op(sum(c.tokens for c in chunks) * self.model.hidden_size * ACT_BYTES)
        if plan.is_last:  # LM head on the last token of each chunk (FORMAT §6 logits_gemm: m = b)
            total += self._lm_head(len(chunks))
        return total

    def _lm_head(self, chunks: int) -> float:
        """The LM head's GEMM over one token of each of ``chunks`` chunks (remembered: a wave has a few)."""
        seconds = self._head_cache.get(chunks)
        if seconds is None:
            seconds = self._head_cache[chunks] = self._gemm_bf16(chunks, self.model.vocab_size // self.tp,
                                                                 self.model.hidden_size)
        return seconds

    def transfer_time(self, stage: int, num_tokens: int) -> float:
        """The activations' hop from ``stage`` to the next, as the analytic model prices it
        (:func:`costmodel.activation_send_time`: PP x TP fills one node, so the hop is NVLink)."""
        self._stage(stage)
        if stage == len(self._stages) - 1:
            return 0.0
        return activation_send_time(self.model, self.hardware, num_tokens)

    def _stage(self, stage: int) -> _StagePlan:
        if not 0 <= stage < len(self._stages):
            raise ValueError(f"stage {stage} out of range [0, {len(self._stages)})")
        return self._stages[stage]
