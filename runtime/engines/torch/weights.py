"""Weights under Hugging Face tensor names: seeded random ones, or a local safetensors directory.

Names follow transformers 5 (the version the exactness check runs against). Its Qwen2-MoE fuses
the routed experts into two 3-D tensors per layer::

    model.layers.{i}.mlp.experts.gate_up_proj  (E, 2*I, H)   rows [0, I) gate, [I, 2I) up
    model.layers.{i}.mlp.experts.down_proj     (E, H, I)

Checkpoints on disk usually store one tensor per expert (``mlp.experts.{e}.gate_proj.weight`` ...);
``load_hf_dir`` fuses those into the layout above.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import torch
from safetensors import safe_open

from wavepp.runtime.engines.torch.config import DecoderConfig

INIT_STD = 0.02


def expected_shapes(cfg: DecoderConfig) -> dict[str, tuple[int, ...]]:
    """Every tensor the model needs, by Hugging Face name, in a fixed order (the seeded draw order)."""
    h, hd, v = cfg.hidden_size, cfg.head_dim, cfg.vocab_size
    out: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (v, h)}
    for i in range(cfg.num_layers):
        p = f"model.layers.{i}."
        out[p + "input_layernorm.weight"] = (h,)
        for name, rows in (("q", cfg.num_heads * hd), ("k", cfg.num_kv_heads * hd), ("v", cfg.num_kv_heads * hd)):
            out[p + f"self_attn.{name}_proj.weight"] = (rows, h)
            if cfg.attention_bias:
                out[p + f"self_attn.{name}_proj.bias"] = (rows,)
        out[p + "self_attn.o_proj.weight"] = (h, cfg.num_heads * hd)
        out[p + "post_attention_layernorm.weight"] = (h,)
        if cfg.is_moe:
            e, mi, si = cfg.num_experts, cfg.moe_intermediate_size, cfg.shared_expert_intermediate_size
            out[p + "mlp.gate.weight"] = (e, h)
            out[p + "mlp.experts.gate_up_proj"] = (e, 2 * mi, h)
            out[p + "mlp.experts.down_proj"] = (e, h, mi)
            if si:
                out.update(_mlp_shapes(p + "mlp.shared_expert.", h, si))
                out[p + "mlp.shared_expert_gate.weight"] = (1, h)
        else:
            out.update(_mlp_shapes(p + "mlp.", h, cfg.intermediate_size))
    out["model.norm.weight"] = (h,)
    if not cfg.tie_word_embeddings:
        out["lm_head.weight"] = (v, h)
    return out


def _mlp_shapes(prefix: str, h: int, inter: int) -> dict[str, tuple[int, ...]]:
    return {prefix + "gate_proj.weight": (inter, h), prefix + "up_proj.weight": (inter, h),
            prefix + "down_proj.weight": (h, inter)}


def _is_norm(name: str) -> bool:
    return name.endswith("norm.weight")


def random_weights(cfg: DecoderConfig, seed: int) -> dict[str, torch.Tensor]:
    """Seeded float32 CPU weights: normal(0, 0.02) everywhere (biases included), RMSNorm weights one."""
    gen = torch.Generator().manual_seed(seed)
    out: dict[str, torch.Tensor] = {}
    for name, shape in expected_shapes(cfg).items():
        if _is_norm(name):
            out[name] = torch.ones(shape)
        else:
            out[name] = torch.randn(shape, generator=gen).mul_(INIT_STD)
    return out


def load_hf_dir(path: str | Path, cfg: DecoderConfig) -> dict[str, torch.Tensor]:
    """Load the tensors ``cfg`` needs from ``path/*.safetensors`` (as stored: dtype unchanged, CPU).

    Raises a one-line ``ValueError`` naming the first missing or mis-shaped tensor. Tensors the
    model does not use (``rotary_emb.inv_freq``, a tied ``lm_head``) are ignored.
    """
    root = Path(path)
    files = sorted(root.glob("*.safetensors"))
    if not files:
        raise ValueError(f"{root}: no *.safetensors files")
    where: dict[str, Path] = {}
    for f in files:
        try:
            with safe_open(str(f), framework="pt") as sf:
                where.update(dict.fromkeys(sf.keys(), f))
        except Exception as e:  # safetensors raises its own error types for corrupt headers
            raise ValueError(f"{f}: not a readable safetensors file ({type(e).__name__})") from None

    def get(name: str) -> torch.Tensor | None:
        if name not in where:
            return None
        with safe_open(str(where[name]), framework="pt") as sf:
            tensor: torch.Tensor = sf.get_tensor(name)
            return tensor

    out: dict[str, torch.Tensor] = {}
    for name, shape in expected_shapes(cfg).items():
        t = get(name)
        if t is None and name.endswith(("experts.gate_up_proj", "experts.down_proj")):
            t = _fuse_experts(root, name, cfg.num_experts, get)
        if t is None:
            raise ValueError(f"{root}: missing tensor {name}")
        if tuple(t.shape) != shape:
            raise ValueError(f"{root}: tensor {name} has shape {tuple(t.shape)}, the config needs {shape}")
        out[name] = t
    return out


def _fuse_experts(root: Path, name: str, num_experts: int,
                  get: Callable[[str], torch.Tensor | None]) -> torch.Tensor | None:
    """Stack per-expert checkpoint tensors into transformers 5's fused layout.

    None when the checkpoint has no per-expert tensors for this layer (the fused name is then the
    missing one); a ``ValueError`` naming the first absent or mis-shaped per-expert tensor otherwise.
    """
    base = name.rsplit(".", 1)[0]  # model.layers.{i}.mlp.experts
    parts = ("gate", "up") if name.endswith("gate_up_proj") else ("down",)
    per_expert: list[torch.Tensor] = []
    for e in range(num_experts):
        ts: list[torch.Tensor] = []
        for p in parts:
            key = f"{base}.{e}.{p}_proj.weight"
            t = get(key)
            if t is None:
                if e == 0 and p == parts[0]:
                    return None
                raise ValueError(f"{root}: missing tensor {key}")
            if ts and t.shape != ts[0].shape:
                raise ValueError(f"{root}: tensor {key} has shape {tuple(t.shape)}, expected {tuple(ts[0].shape)}")
            ts.append(t)
        fused = torch.cat(ts, dim=0)  # gate rows then up rows, as transformers fuses them
        if per_expert and fused.shape != per_expert[0].shape:
            raise ValueError(f"{root}: tensors of {base}.{e} have shapes that differ from expert 0's")
        per_expert.append(fused)
    return torch.stack(per_expert)
