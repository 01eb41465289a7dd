"""A Llama-family decoder split into pipeline stages, each with a paged KV cache per layer.

One stage computes a *wave*: several chunks (from one or several requests) concatenated along
the token axis. Chunk ``c`` covers positions ``[start, start + length)`` of its request; its
queries see the request's prefix ``[0, start)`` through the block table, and causally the chunk
itself. Per layer, the whole wave's K/V is written into the pool first, then each chunk attends
to what its block table gathers back (so the attention never sees K/V the cache does not hold)::

    pool  k_cache[l]: (num_blocks, B, nkv, hd)       position p of a request lives at
    slot  table[p // B] * B + p % B                   k_cache[l].view(-1, nkv, hd)[slot]

Numerics follow transformers' Llama / Qwen2 / Qwen2-MoE (RMSNorm in float32, HF RoPE, softmax
router in float32), so ``check.run_check`` can compare against them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from wavepp.runtime.engines.torch.config import DecoderConfig
from wavepp.runtime.request import cdiv


def default_device_dtype() -> tuple[torch.device, torch.dtype]:
    """CUDA in bfloat16 when present, else CPU in float32."""
    if torch.cuda.is_available():
        return torch.device("cuda"), torch.bfloat16
    return torch.device("cpu"), torch.float32


@dataclass(frozen=True, slots=True)
class ChunkSpec:
    """One chunk of a wave on one stage: ``block_table`` covers positions ``[0, start + length)``."""

    start: int
    length: int
    block_table: Sequence[int]


@dataclass(frozen=True, slots=True)
class _ChunkPlan:
    lo: int  # rows [lo, hi) of the wave
    hi: int
    gather: Tensor  # (S,) cache slots of positions [0, start + length), S = start + length
    mask: Tensor  # (length, S) bool: key j visible to query i iff j <= start + i


@dataclass(frozen=True, slots=True)
class _WavePlan:
    """Everything about a wave that does not depend on the layer: computed once per stage call."""

    slots: Tensor  # (T,) cache slot of every wave token
    cos: Tensor  # (T, hd)
    sin: Tensor  # (T, hd)
    chunks: list[_ChunkPlan]
    last: Tensor  # (num_chunks,) row of each chunk's last token


def _param(t: Tensor, device: torch.device | str, dtype: torch.dtype) -> nn.Parameter:
    return nn.Parameter(t.to(device=device, dtype=dtype), requires_grad=False)


class RMSNorm(nn.Module):
    def __init__(self, weight: Tensor, eps: float) -> None:
        super().__init__()
        self.weight, self.eps = weight, eps

    def forward(self, x: Tensor) -> Tensor:
        xf = x.float()  # HF normalizes in float32 and scales in the input dtype
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * xf.to(x.dtype)


def _rotate_half(x: Tensor) -> Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def rope_cos_sin(positions: Tensor, head_dim: int, theta: float, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
    """HF Llama RoPE tables for ``positions`` (T,): cos, sin of shape (T, head_dim)."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, device=positions.device).float() / head_dim))
    freqs = positions.float()[:, None] * inv_freq[None, :]  # (T, hd/2)
    emb = torch.cat((freqs, freqs), dim=-1)  # (T, hd)
    return emb.cos().to(dtype), emb.sin().to(dtype)


class DecoderLayer(nn.Module):
    """Attention (GQA, RoPE, paged KV) then a SwiGLU or Qwen2-MoE FFN, both pre-norm residual."""

    def __init__(self, cfg: DecoderConfig, i: int, w: dict[str, Tensor], device: torch.device | str,
                 dtype: torch.dtype) -> None:
        super().__init__()
        p = f"model.layers.{i}."
        self.cfg = cfg
        self.nh, self.nkv, self.hd = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
        self.in_norm = RMSNorm(_param(w[p + "input_layernorm.weight"], device, dtype), cfg.rms_norm_eps)
        self.post_norm = RMSNorm(_param(w[p + "post_attention_layernorm.weight"], device, dtype), cfg.rms_norm_eps)
        # q, k, v fused into one matmul: rows [q (nh*hd) | k (nkv*hd) | v (nkv*hd)].
        qkv = [w[p + f"self_attn.{n}_proj.weight"] for n in "qkv"]
        self.w_qkv = _param(torch.cat(qkv), device, dtype)
        self.b_qkv = (_param(torch.cat([w[p + f"self_attn.{n}_proj.bias"] for n in "qkv"]), device, dtype)
                      if cfg.attention_bias else None)
        self.w_o = _param(w[p + "self_attn.o_proj.weight"], device, dtype)
        # The dense FFN, or the MoE's shared expert, lives in w_gate_up / w_down (None: no shared expert).
        self.w_shared_gate: nn.Parameter | None = None
        if cfg.is_moe:
            self.w_router = _param(w[p + "mlp.gate.weight"], device, dtype)  # (E, H)
            self.w_experts_gate_up = _param(w[p + "mlp.experts.gate_up_proj"], device, dtype)  # (E, 2I, H)
            self.w_experts_down = _param(w[p + "mlp.experts.down_proj"], device, dtype)  # (E, H, I)
            mlp = p + "mlp.shared_expert." if cfg.shared_expert_intermediate_size else None
            if mlp is not None:
                self.w_shared_gate = _param(w[p + "mlp.shared_expert_gate.weight"], device, dtype)  # (1, H)
        else:
            mlp = p + "mlp."
        if mlp is not None:  # gate and up fused: rows [gate (I) | up (I)], as transformers fuses experts
            self.w_gate_up = _param(torch.cat([w[mlp + "gate_proj.weight"], w[mlp + "up_proj.weight"]]), device, dtype)
            self.w_down = _param(w[mlp + "down_proj.weight"], device, dtype)

    def forward(self, x: Tensor, plan: _WavePlan, k_cache: Tensor, v_cache: Tensor) -> Tensor:
        x = x + self._attention(self.in_norm(x), plan, k_cache, v_cache)
        h = self.post_norm(x)
        return x + (self._moe(h) if self.cfg.is_moe else self._swiglu(h))

    def _attention(self, x: Tensor, plan: _WavePlan, k_cache: Tensor, v_cache: Tensor) -> Tensor:
        T = x.shape[0]
        nh, nkv, hd = self.nh, self.nkv, self.hd
        qkv = F.linear(x, self.w_qkv, self.b_qkv)  # (T, (nh + 2 nkv) hd)
        q, k, v = qkv.split([nh * hd, nkv * hd, nkv * hd], dim=-1)  # type: ignore[no-untyped-call]  # torch stubs
        q = q.view(T, nh, hd)
        k = k.view(T, nkv, hd)
        cos, sin = plan.cos[:, None, :], plan.sin[:, None, :]  # (T, 1, hd)
        q = q * cos + _rotate_half(q) * sin
        k = k * cos + _rotate_half(k) * sin
        k_flat = k_cache.view(-1, nkv, hd)  # (num_blocks * B, nkv, hd)
        v_flat = v_cache.view(-1, nkv, hd)
        k_flat.index_copy_(0, plan.slots, k)  # the whole wave's K/V first: chunks read it back below
        v_flat.index_copy_(0, plan.slots, v.reshape(T, nkv, hd))
        out = torch.empty_like(q)  # (T, nh, hd)
        for c in plan.chunks:
            # Batched (1, heads, len, hd) operands: on a CPU this is what selects PyTorch's fused
            # flash-attention kernel (3-D operands take the math path, which materializes the
            # len x S scores: 2.5-4.5x slower once they spill out of the caches, at 512 x 2k).
            qc = q[c.lo:c.hi].transpose(0, 1)[None]  # (1, nh, L, hd)
            kc = k_flat.index_select(0, c.gather).transpose(0, 1)[None]  # (1, nkv, S, hd)
            vc = v_flat.index_select(0, c.gather).transpose(0, 1)[None]
            oc = F.scaled_dot_product_attention(qc, kc, vc, attn_mask=c.mask, enable_gqa=nh != nkv)
            out[c.lo:c.hi] = oc[0].transpose(0, 1)
        return F.linear(out.view(T, nh * hd), self.w_o)

    def _swiglu(self, x: Tensor) -> Tensor:
        gate, up = F.linear(x, self.w_gate_up).chunk(2, dim=-1)  # (T, I) each
        return F.linear(F.silu(gate) * up, self.w_down)

    def _moe(self, x: Tensor) -> Tensor:
        """Qwen2-MoE: softmax router, top-k (renormalized if configured), plus a sigmoid-gated shared expert."""
        cfg = self.cfg
        probs = F.softmax(F.linear(x, self.w_router), dim=-1, dtype=torch.float32)  # (T, E)
        top_w, top_i = torch.topk(probs, cfg.experts_per_token, dim=-1)  # (T, k)
        if cfg.norm_topk_prob:
            top_w = top_w / top_w.sum(dim=-1, keepdim=True)
        top_w = top_w.to(x.dtype)
        out = torch.zeros_like(x)  # (T, H)
        for e in top_i.unique().tolist():  # type: ignore[no-untyped-call]  # experts in increasing order (as transformers)
            tok, slot = torch.where(top_i == e)  # tokens routed to e, and which of their k picks it is
            gate, up = F.linear(x[tok], self.w_experts_gate_up[e]).chunk(2, dim=-1)
            y = F.linear(F.silu(gate) * up, self.w_experts_down[e]) * top_w[tok, slot, None]
            out.index_add_(0, tok, y)
        if self.w_shared_gate is not None:
            out = out + torch.sigmoid(F.linear(x, self.w_shared_gate)) * self._swiglu(x)
        return out


class StageModel(nn.Module):
    """Layers ``[a, b)`` of the decoder; the first stage embeds, the last applies the norm and LM head.

    Each layer owns a K and a V pool of ``num_blocks`` blocks, allocated once: the block count is
    the stage's KV memory budget. Which block holds what is the caller's business (block tables).
    """

    def __init__(self, cfg: DecoderConfig, layers: range, first: bool, last: bool, num_blocks: int,
                 block_size: int, weights: dict[str, Tensor], device: torch.device | str = "cpu",
                 dtype: torch.dtype = torch.float32) -> None:
        super().__init__()
        if num_blocks < 1 or block_size < 1:
            raise ValueError(f"num_blocks and block_size must be positive, got {num_blocks}, {block_size}")
        self.cfg, self.layer_ids, self.first, self.last = cfg, layers, first, last
        self.num_blocks, self.block_size = num_blocks, block_size
        self.device, self.dtype = torch.device(device), dtype
        self.embed = _param(weights["model.embed_tokens.weight"], device, dtype) if first else None
        self.layers = nn.ModuleList(DecoderLayer(cfg, i, weights, device, dtype) for i in layers)
        if last:
            self.norm = RMSNorm(_param(weights["model.norm.weight"], device, dtype), cfg.rms_norm_eps)
            head = "model.embed_tokens.weight" if cfg.tie_word_embeddings else "lm_head.weight"
            self.lm_head: nn.Parameter = (self.embed if self.embed is not None and cfg.tie_word_embeddings
                                          else _param(weights[head], device, dtype))
        shape = (num_blocks, block_size, cfg.num_kv_heads, cfg.head_dim)
        self.k_cache = [torch.zeros(shape, device=device, dtype=dtype) for _ in layers]
        self.v_cache = [torch.zeros(shape, device=device, dtype=dtype) for _ in layers]

    @torch.inference_mode()
    def forward_wave(self, inputs: Tensor, chunks: Sequence[ChunkSpec]) -> Tensor:
        """Run one wave through this stage, writing its K/V into the pools.

        ``inputs``: token ids (T,) on the first stage, hidden states (T, H) elsewhere, chunks
        concatenated in order. Returns hidden states (T, H), or on the last stage the logits of
        each chunk's last position (num_chunks, vocab).
        """
        plan = self._plan(inputs.shape[0], chunks)
        if self.first:
            assert self.embed is not None
            x = F.embedding(inputs.to(self.device), self.embed)  # (T, H)
        else:
            x = inputs.to(device=self.device, dtype=self.dtype)
        for layer, kc, vc in zip(self.layers, self.k_cache, self.v_cache, strict=True):
            x = layer(x, plan, kc, vc)
        if not self.last:
            return x
        return F.linear(self.norm(x[plan.last]), self.lm_head)  # (num_chunks, vocab)

    def gather_kv(self, layer: int, block_table: Sequence[int], num_tokens: int) -> tuple[Tensor, Tensor]:
        """K (after RoPE) and V of positions ``[0, num_tokens)`` of decoder layer ``layer`` (global id),
        read through ``block_table``: each (num_tokens, nkv, hd)."""
        j = self.layer_ids.index(layer)
        slots = self._slots(block_table, num_tokens)
        nkv, hd = self.cfg.num_kv_heads, self.cfg.head_dim
        return (self.k_cache[j].view(-1, nkv, hd)[slots], self.v_cache[j].view(-1, nkv, hd)[slots])

    def _slots(self, block_table: Sequence[int], num_tokens: int) -> Tensor:
        B = self.block_size
        if len(block_table) * B < num_tokens:
            raise ValueError(f"block table of {len(block_table)} blocks cannot hold {num_tokens} tokens (B={B})")
        blocks = torch.as_tensor(list(block_table[: cdiv(num_tokens, B)]), dtype=torch.long)
        if blocks.numel() and (int(blocks.min()) < 0 or int(blocks.max()) >= self.num_blocks):
            raise ValueError(f"block id out of range [0, {self.num_blocks}) in block table")
        slots = (blocks[:, None] * B + torch.arange(B)[None, :]).flatten()[:num_tokens]
        return slots.to(self.device)

    def _plan(self, num_rows: int, chunks: Sequence[ChunkSpec]) -> _WavePlan:
        if not chunks:
            raise ValueError("a wave needs at least one chunk")
        if sum(c.length for c in chunks) != num_rows:
            raise ValueError(f"chunk lengths sum to {sum(c.length for c in chunks)}, inputs have {num_rows} rows")
        plans, slots, positions, lo = [], [], [], 0
        for c in chunks:
            if c.start < 0 or c.length < 1 or c.start + c.length > self.cfg.max_position:
                raise ValueError(f"chunk [{c.start}, {c.start + c.length}) outside [0, {self.cfg.max_position})")
            S = c.start + c.length
            gather = self._slots(c.block_table, S)
            q_pos = torch.arange(c.start, S, device=self.device)  # (L,)
            mask = torch.arange(S, device=self.device)[None, :] <= q_pos[:, None]  # (L, S)
            plans.append(_ChunkPlan(lo, lo + c.length, gather, mask))
            slots.append(gather[c.start:])
            positions.append(q_pos)
            lo += c.length
        cos, sin = rope_cos_sin(torch.cat(positions), self.cfg.head_dim, self.cfg.rope_theta, self.dtype)
        last = torch.tensor([p.hi - 1 for p in plans], device=self.device)
        return _WavePlan(torch.cat(slots), cos, sin, plans, last)


def split_layers(num_layers: int, pp: int) -> list[range]:
    """Contiguous, as even as possible; the first ``num_layers % pp`` stages get one layer more."""
    if not 1 <= pp <= num_layers:
        raise ValueError(f"pp must be in [1, num_layers={num_layers}], got {pp}")
    base, extra = divmod(num_layers, pp)
    out, a = [], 0
    for s in range(pp):
        b = a + base + (s < extra)
        out.append(range(a, b))
        a = b
    return out


def build_stages(cfg: DecoderConfig, pp: int, num_blocks_per_stage: Sequence[int], block_size: int,
                 weights: dict[str, Tensor], device: torch.device | str = "cpu",
                 dtype: torch.dtype = torch.float32) -> list[StageModel]:
    """The ``pp`` stages of ``cfg``, stage ``s`` with a pool of ``num_blocks_per_stage[s]`` blocks per layer."""
    ranges = split_layers(cfg.num_layers, pp)
    if len(num_blocks_per_stage) != pp:
        raise ValueError(f"num_blocks_per_stage has {len(num_blocks_per_stage)} entries for pp={pp}")
    return [StageModel(cfg, r, s == 0, s == pp - 1, n, block_size, weights, device, dtype)
            for s, (r, n) in enumerate(zip(ranges, num_blocks_per_stage, strict=True))]
