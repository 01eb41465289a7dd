"""Decoder shape for the torch engine: built-in profiles, or a Hugging Face ``config.json``.

Only what the engine computes exactly is accepted (Llama, Qwen2, Qwen2-MoE with plain RoPE and
full attention). Anything else - scaled RoPE, sliding windows, biases we do not model - is refused
with a one-line ``ValueError`` naming the problem, never silently approximated.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SUPPORTED_MODEL_TYPES = ("llama", "qwen2", "qwen2_moe")


@dataclass(frozen=True, slots=True)
class DecoderConfig:
    """A Llama-family decoder. ``num_experts == 0``: dense SwiGLU FFN; otherwise a Qwen2-MoE FFN
    (softmax router, top-``experts_per_token``, optional shared expert) on every layer."""

    vocab_size: int
    hidden_size: int
    intermediate_size: int  # dense FFN width (unused when every layer is MoE)
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int = 0  # 0: hidden_size // num_heads
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    max_position: int = 4096
    attention_bias: bool = False  # q/k/v projections carry a bias (Qwen2); o_proj never does
    tie_word_embeddings: bool = False
    num_experts: int = 0
    experts_per_token: int = 0
    moe_intermediate_size: int = 0
    shared_expert_intermediate_size: int = 0  # 0: no shared expert
    norm_topk_prob: bool = False
    model_type: str = "llama"  # the Hugging Face architecture this shape is read from / checked against

    def __post_init__(self) -> None:
        for name in ("vocab_size", "hidden_size", "num_layers", "num_heads", "num_kv_heads", "max_position"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        for name in ("rms_norm_eps", "rope_theta"):
            if not 0 < getattr(self, name) < math.inf:      # NaN fails both comparisons
                raise ValueError(f"{name} must be a positive finite number, got {getattr(self, name)}")
        if self.model_type not in SUPPORTED_MODEL_TYPES:
            raise ValueError(_unsupported_type(self.model_type))
        if self.num_heads % self.num_kv_heads:
            raise ValueError(f"num_heads {self.num_heads} is not divisible by num_kv_heads {self.num_kv_heads}")
        if self.head_dim == 0:
            if self.hidden_size % self.num_heads:
                raise ValueError(f"hidden_size {self.hidden_size} is not divisible by num_heads {self.num_heads}")
            object.__setattr__(self, "head_dim", self.hidden_size // self.num_heads)
        if self.head_dim < 2 or self.head_dim % 2:
            raise ValueError(f"head_dim must be even and positive for RoPE, got {self.head_dim}")
        if self.num_experts:
            if not 1 <= self.experts_per_token <= self.num_experts:
                raise ValueError(f"experts_per_token {self.experts_per_token} not in [1, {self.num_experts}]")
            if self.moe_intermediate_size < 1:
                raise ValueError(f"moe_intermediate_size must be positive, got {self.moe_intermediate_size}")
        elif self.intermediate_size < 1:
            raise ValueError(f"intermediate_size must be positive, got {self.intermediate_size}")

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @classmethod
    def from_hf_dict(cls, d: dict[str, Any]) -> DecoderConfig:
        """Map a Hugging Face ``config.json`` (llama, qwen2, qwen2_moe); ``ValueError`` when unsupported."""
        mt = d.get("model_type")
        if mt not in SUPPORTED_MODEL_TYPES:
            raise ValueError(_unsupported_type(mt))
        _refuse_unsupported(d, mt)
        heads = _int(d, "num_attention_heads")
        kw: dict[str, Any] = dict(
            vocab_size=_int(d, "vocab_size"),
            hidden_size=_int(d, "hidden_size"),
            intermediate_size=_int(d, "intermediate_size"),
            num_layers=_int(d, "num_hidden_layers"),
            num_heads=heads,
            num_kv_heads=_int(d, "num_key_value_heads", heads),
            head_dim=_int(d, "head_dim", 0),
            rms_norm_eps=_float(d, "rms_norm_eps", 1e-6),
            rope_theta=_rope_theta(d),
            max_position=_int(d, "max_position_embeddings", 4096),
            tie_word_embeddings=bool(d.get("tie_word_embeddings", False)),
            model_type=mt,
            attention_bias=mt == "qwen2" or (mt == "qwen2_moe" and bool(d.get("qkv_bias", True))),
        )
        if mt == "qwen2_moe":
            kw.update(
                num_experts=_int(d, "num_experts"),
                experts_per_token=_int(d, "num_experts_per_tok"),
                moe_intermediate_size=_int(d, "moe_intermediate_size"),
                shared_expert_intermediate_size=_int(d, "shared_expert_intermediate_size", 0),
                norm_topk_prob=bool(d.get("norm_topk_prob", False)),
            )
            if kw["num_experts"] == 0:
                raise ValueError("qwen2_moe config with num_experts 0 is not supported (use model_type qwen2)")
        return cls(**kw)

    def to_hf_dict(self) -> dict[str, Any]:
        """The ``config.json`` a Hugging Face model of this shape would carry (inverse of ``from_hf_dict``)."""
        arch = {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM", "qwen2_moe": "Qwen2MoeForCausalLM"}
        d: dict[str, Any] = {
            "model_type": self.model_type,
            "architectures": [arch[self.model_type]],
            "vocab_size": self.vocab_size,
            "hidden_size": self.hidden_size,
            "intermediate_size": self.intermediate_size,
            "num_hidden_layers": self.num_layers,
            "num_attention_heads": self.num_heads,
            "num_key_value_heads": self.num_kv_heads,
            "head_dim": self.head_dim,
            "hidden_act": "silu",
            "rms_norm_eps": self.rms_norm_eps,
            "rope_parameters": {"rope_type": "default", "rope_theta": self.rope_theta},
            "max_position_embeddings": self.max_position,
            "tie_word_embeddings": self.tie_word_embeddings,
        }
        if self.model_type == "llama":
            d.update(attention_bias=False, mlp_bias=False)
        if self.model_type == "qwen2":
            d.update(use_sliding_window=False)
        if self.model_type == "qwen2_moe":
            d.update(
                qkv_bias=self.attention_bias, use_sliding_window=False, num_experts=self.num_experts,
                num_experts_per_tok=self.experts_per_token, moe_intermediate_size=self.moe_intermediate_size,
                shared_expert_intermediate_size=self.shared_expert_intermediate_size,
                norm_topk_prob=self.norm_topk_prob, decoder_sparse_step=1, mlp_only_layers=[],
            )
        return d


PROFILES: dict[str, DecoderConfig] = {
    "tiny-llama": DecoderConfig(
        vocab_size=32000, hidden_size=512, intermediate_size=1408, num_layers=8, num_heads=8, num_kv_heads=2,
        rms_norm_eps=1e-5, rope_theta=10000.0, max_position=4096, model_type="llama",
    ),
    "tiny-moe": DecoderConfig(
        vocab_size=32000, hidden_size=256, intermediate_size=1024, num_layers=4, num_heads=4, num_kv_heads=2,
        rms_norm_eps=1e-6, rope_theta=10000.0, max_position=4096, attention_bias=True, num_experts=8,
        experts_per_token=2, moe_intermediate_size=256, shared_expert_intermediate_size=512,
        model_type="qwen2_moe",
    ),
}


def read_hf_dict(spec: str | Path) -> dict[str, Any]:
    """The JSON object of a ``config.json`` path, or of ``<dir>/config.json``; one-line ``ValueError``."""
    path = Path(spec)
    if not path.exists():
        names = ", ".join(PROFILES)
        raise ValueError(f"model {str(spec)!r} is neither a built-in profile ({names}) nor an existing path")
    if path.is_dir():
        path = path / "config.json"
        if not path.is_file():
            raise ValueError(f"{spec}: directory has no config.json")
    try:
        d = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}: invalid JSON ({e.msg} at line {e.lineno} column {e.colno})") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ValueError(f"{path}: cannot read ({type(e).__name__})") from None
    if not isinstance(d, dict):
        raise ValueError(f"{path}: expected a JSON object, got {type(d).__name__}")
    return d


def load_config(spec: str | Path) -> DecoderConfig:
    """A built-in profile name, a ``config.json`` path, or a Hugging Face model directory."""
    if isinstance(spec, str) and spec in PROFILES:
        return PROFILES[spec]
    d = read_hf_dict(spec)
    try:
        return DecoderConfig.from_hf_dict(d)
    except ValueError as e:
        raise ValueError(f"{spec}: {e}") from None


def _unsupported_type(mt: object) -> str:
    return f"unsupported model_type {mt!r} (supported: {', '.join(SUPPORTED_MODEL_TYPES)})"


def _refuse_unsupported(d: dict[str, Any], mt: str) -> None:
    if d.get("rope_scaling"):
        raise ValueError(f"rope_scaling is not supported ({json.dumps(d['rope_scaling'], sort_keys=True)})")
    rp = d.get("rope_parameters")
    if rp is not None and not isinstance(rp, dict):
        raise ValueError(f"rope_parameters must be an object, got {rp!r}")
    if rp and rp.get("rope_type", "default") != "default":
        raise ValueError(f"rope_type {rp['rope_type']!r} is not supported (only default RoPE)")
    if (rp or {}).get("partial_rotary_factor", d.get("partial_rotary_factor", 1.0)) != 1.0:
        raise ValueError("partial_rotary_factor other than 1.0 is not supported")
    if d.get("hidden_act", "silu") != "silu":
        raise ValueError(f"hidden_act {d['hidden_act']!r} is not supported (only silu)")
    if d.get("use_sliding_window"):
        raise ValueError("sliding window attention (use_sliding_window) is not supported")
    layer_types = d.get("layer_types") or []
    if not isinstance(layer_types, list):
        raise ValueError(f"layer_types must be a list, got {json.dumps(layer_types)}")
    if any(t != "full_attention" for t in layer_types):
        raise ValueError("layer_types other than full_attention are not supported")
    if d.get("quantization_config"):
        raise ValueError("quantized checkpoints (quantization_config) are not supported")
    if mt == "llama" and d.get("attention_bias"):
        raise ValueError("llama attention_bias is not supported (it adds an o_proj bias)")
    if mt == "llama" and d.get("mlp_bias"):
        raise ValueError("llama mlp_bias is not supported")
    if mt == "qwen2_moe" and d.get("decoder_sparse_step", 1) != 1:
        raise ValueError(f"decoder_sparse_step {d['decoder_sparse_step']} is not supported (every layer MoE)")
    if mt == "qwen2_moe" and d.get("mlp_only_layers"):
        raise ValueError("mlp_only_layers is not supported (every layer MoE)")


def _int(d: dict[str, Any], key: str, default: int | None = None) -> int:
    v = d.get(key, default)
    if v is None:
        if default is not None:
            return default
        raise ValueError(f"config is missing required key {key!r}")
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise ValueError(f"config key {key!r} must be a non-negative integer, got {v!r}")
    return v


def _float(d: dict[str, Any], key: str, default: float) -> float:
    """A positive finite number; absent: ``default``. An explicit null, NaN or Infinity is refused
    (JSON from Python may carry them: they would run and produce NaN logits, or crash later)."""
    v = d.get(key, default)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not (0 < v < math.inf):
        raise ValueError(f"config key {key!r} must be a positive finite number, got {json.dumps(v)}")
    return float(v)


def _rope_theta(d: dict[str, Any]) -> float:
    rp = d.get("rope_parameters") or {}
    if "rope_theta" in rp:
        return _float(rp, "rope_theta", 10000.0)
    return _float(d, "rope_theta", 10000.0)
