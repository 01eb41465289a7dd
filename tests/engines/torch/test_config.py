"""Profiles, Hugging Face configs and checkpoints: what loads, and one-line errors for what does not."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import save_file

from wavepp.runtime.engines.torch.check import run_check
from wavepp.runtime.engines.torch.config import PROFILES, DecoderConfig, load_config
from wavepp.runtime.engines.torch.weights import expected_shapes, load_hf_dir, random_weights

SMALL = DecoderConfig(vocab_size=256, hidden_size=64, intermediate_size=96, num_layers=3, num_heads=4,
                      num_kv_heads=2, rope_theta=500000.0, rms_norm_eps=1e-5)
SMALL_MOE = DecoderConfig(vocab_size=256, hidden_size=64, intermediate_size=96, num_layers=2, num_heads=4,
                          num_kv_heads=1, attention_bias=True, num_experts=4, experts_per_token=2,
                          moe_intermediate_size=32, shared_expert_intermediate_size=48, model_type="qwen2_moe")


def one_line_value_error(fn: Any, *args: Any) -> str:
    with pytest.raises(ValueError) as e:
        fn(*args)
    msg = str(e.value)
    assert msg and "\n" not in msg, msg
    return msg


def test_profiles() -> None:
    llama = load_config("tiny-llama")
    assert (llama.num_layers, llama.hidden_size, llama.num_heads, llama.num_kv_heads) == (8, 512, 8, 2)
    assert llama.head_dim == 64
    assert (llama.intermediate_size, llama.vocab_size, llama.max_position, llama.is_moe) == (1408, 32000, 4096, False)
    moe = load_config("tiny-moe")
    assert (moe.num_layers, moe.hidden_size, moe.num_heads, moe.num_kv_heads, moe.model_type) == (4, 256, 4, 2,
                                                                                                 "qwen2_moe")
    assert (moe.num_experts, moe.experts_per_token, moe.moe_intermediate_size) == (8, 2, 256)
    assert moe.shared_expert_intermediate_size == 512 and moe.attention_bias


@pytest.mark.parametrize("cfg", [*PROFILES.values(), SMALL, SMALL_MOE])
def test_hf_dict_round_trip(cfg: DecoderConfig) -> None:
    assert DecoderConfig.from_hf_dict(cfg.to_hf_dict()) == cfg


def test_configs_written_by_transformers() -> None:
    import transformers

    d = transformers.Qwen2Config(vocab_size=300, hidden_size=96, intermediate_size=128, num_hidden_layers=2,
                                 num_attention_heads=6, num_key_value_heads=2,
                                 rope_parameters={"rope_type": "default", "rope_theta": 1e6}).to_dict()
    cfg = DecoderConfig.from_hf_dict(d)
    assert (cfg.model_type, cfg.attention_bias, cfg.head_dim, cfg.rope_theta, cfg.num_kv_heads) == ("qwen2", True, 16,
                                                                                                   1e6, 2)
    d = transformers.LlamaConfig(hidden_size=64, num_attention_heads=4, num_hidden_layers=2, head_dim=32).to_dict()
    assert DecoderConfig.from_hf_dict(d).head_dim == 32
    legacy = {**SMALL.to_hf_dict(), "rope_theta": 123.0}  # pre-v5 files keep rope_theta at the top level
    del legacy["rope_parameters"]
    assert DecoderConfig.from_hf_dict(legacy).rope_theta == 123.0


def _with(**changes: Any) -> dict[str, Any]:
    d = {**SMALL.to_hf_dict(), **changes}
    return {k: v for k, v in d.items() if v is not ...}  # ... deletes a key


@pytest.mark.parametrize(("d", "fragment"), [
    (_with(model_type="gpt2"), "model_type 'gpt2'"),
    (_with(num_key_value_heads=3), "not divisible by num_kv_heads 3"),
    (_with(hidden_size=66, head_dim=...), "hidden_size 66 is not divisible"),
    (_with(rope_scaling={"rope_type": "linear", "factor": 2.0}), "rope_scaling"),
    (_with(rope_parameters={"rope_type": "yarn", "rope_theta": 1e4}), "rope_type 'yarn'"),
    (_with(hidden_size=...), "missing required key 'hidden_size'"),
    (_with(num_hidden_layers="4"), "'num_hidden_layers' must be a non-negative integer"),
    (_with(model_type="qwen2", use_sliding_window=True), "sliding window"),
    (_with(hidden_act="gelu"), "hidden_act 'gelu'"),
    (_with(attention_bias=True), "attention_bias"),
    (_with(quantization_config={"quant_method": "fp8"}), "quantization_config"),
    ({**SMALL_MOE.to_hf_dict(), "decoder_sparse_step": 2}, "decoder_sparse_step"),
    ({**SMALL_MOE.to_hf_dict(), "num_experts_per_tok": 5}, "experts_per_token 5"),
])
def test_unsupported_configs_are_refused(d: dict[str, Any], fragment: str) -> None:
    assert fragment in one_line_value_error(DecoderConfig.from_hf_dict, d)


def test_bad_paths(tmp_path: Path) -> None:
    assert "neither a built-in profile" in one_line_value_error(load_config, str(tmp_path / "nope"))
    assert "no config.json" in one_line_value_error(load_config, tmp_path)
    (tmp_path / "config.json").write_text('{"model_type": "llama",\n "hidden_size": }')
    assert "invalid JSON" in one_line_value_error(load_config, tmp_path)
    (tmp_path / "config.json").write_text("[1, 2]")
    assert "expected a JSON object" in one_line_value_error(load_config, tmp_path / "config.json")
    (tmp_path / "config.json").write_text(json.dumps(_with(rope_scaling={"factor": 8.0})))
    msg = one_line_value_error(load_config, tmp_path)
    assert str(tmp_path) in msg and "rope_scaling" in msg


def _write_dir(path: Path, cfg: DecoderConfig, weights: dict[str, torch.Tensor]) -> Path:
    path.mkdir(exist_ok=True)
    (path / "config.json").write_text(json.dumps(cfg.to_hf_dict(), indent=2))
    save_file({k: t.contiguous() for k, t in weights.items()}, str(path / "model.safetensors"))
    return path


def _weights_with_real_norms(cfg: DecoderConfig, seed: int) -> dict[str, torch.Tensor]:
    """Random weights whose RMSNorm scales are not all ones, so a dropped norm weight shows."""
    w = random_weights(cfg, seed)
    gen = torch.Generator().manual_seed(seed)
    return {k: t + 0.2 * torch.randn(t.shape, generator=gen) if k.endswith("norm.weight") else t
            for k, t in w.items()}


@pytest.mark.parametrize("cfg", [SMALL, SMALL_MOE])
def test_hf_dir_round_trip_passes_the_check(tmp_path: Path, cfg: DecoderConfig) -> None:
    weights = _weights_with_real_norms(cfg, 4)
    d = _write_dir(tmp_path / "model", cfg, weights)
    assert load_config(d) == cfg
    loaded = load_hf_dir(d, cfg)
    assert loaded.keys() == weights.keys() and all(torch.equal(loaded[k], weights[k]) for k in weights)
    r = run_check(str(d), pp=2, block_size=4, chunk=6, reuse=9, seed=0)
    assert r.ok, r


def test_checkpoint_saved_by_transformers(tmp_path: Path) -> None:
    """save_pretrained writes one tensor per expert; the loader fuses them in transformers' order."""
    import transformers

    hf = transformers.Qwen2MoeForCausalLM(transformers.Qwen2MoeConfig(**{
        k: v for k, v in SMALL_MOE.to_hf_dict().items() if k not in ("model_type", "architectures")}))
    hf.save_pretrained(tmp_path)
    cfg = load_config(tmp_path)
    assert cfg == SMALL_MOE
    loaded = load_hf_dir(tmp_path, cfg)
    for name, t in hf.state_dict().items():
        assert torch.equal(loaded[name], t), name
    assert run_check(str(tmp_path), pp=2, block_size=4, chunk=5, reuse=6, seed=0).ok


def test_missing_and_misshaped_tensors_are_named(tmp_path: Path) -> None:
    weights = random_weights(SMALL, 0)
    assert "no *.safetensors" in one_line_value_error(load_hf_dir, tmp_path, SMALL)
    gone = "model.layers.1.self_attn.k_proj.weight"
    d = _write_dir(tmp_path / "missing", SMALL, {k: t for k, t in weights.items() if k != gone})
    assert f"missing tensor {gone}" in one_line_value_error(load_hf_dir, d, SMALL)
    bad = "model.layers.2.mlp.down_proj.weight"
    d = _write_dir(tmp_path / "shape", SMALL, {**weights, bad: torch.zeros(64, 95)})
    msg = one_line_value_error(load_hf_dir, d, SMALL)
    assert bad in msg and "(64, 95)" in msg and "(64, 96)" in msg
    # run_check on a directory reads the directory's tensors (not random ones), so it fails the same way.
    assert bad in one_line_value_error(run_check, str(d), 1, 4, 4, 0, 0)


def test_per_expert_checkpoint_with_a_missing_expert(tmp_path: Path) -> None:
    fused = random_weights(SMALL_MOE, 0)
    per_expert = {k: t for k, t in fused.items() if ".experts." not in k}
    for name in [k for k in fused if k.endswith("experts.gate_up_proj")]:
        base = name.rsplit(".", 1)[0]
        for e in range(SMALL_MOE.num_experts):
            gate, up = fused[name][e].chunk(2)
            per_expert[f"{base}.{e}.gate_proj.weight"], per_expert[f"{base}.{e}.up_proj.weight"] = gate, up
            per_expert[f"{base}.{e}.down_proj.weight"] = fused[base + ".down_proj"][e]
    d = _write_dir(tmp_path / "ok", SMALL_MOE, per_expert)
    loaded = load_hf_dir(d, SMALL_MOE)
    assert all(torch.equal(loaded[k], fused[k]) for k in expected_shapes(SMALL_MOE))
    del per_expert["model.layers.1.mlp.experts.3.up_proj.weight"]
    d = _write_dir(tmp_path / "gone", SMALL_MOE, per_expert)
    assert "missing tensor model.layers.1.mlp.experts.3.up_proj.weight" in one_line_value_error(load_hf_dir, d,
                                                                                                   SMALL_MOE)
