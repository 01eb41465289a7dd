"""Profiles: layer splitting, parameter and KV arithmetic, lookups, and vendored numbers vs ../shared/data."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from wavepp.runtime.engines.sim.profiles import HARDWARE, MODELS, get_hardware, get_model, split_layers

# repo_root.parent / "shared" / "data": tests/engines/sim/<this file> -> parents[3] is the repo root.
DATA = Path(__file__).resolve().parents[3].parent / "shared" / "data"


def test_split_layers_glm_pp4() -> None:
    assert split_layers(78, 4) == [range(0, 20), range(20, 40), range(40, 59), range(59, 78)]


@pytest.mark.parametrize("num_layers,pp", [(1, 1), (7, 3), (32, 2), (62, 4), (78, 5), (10, 10)])
def test_split_layers_contiguous_and_even(num_layers: int, pp: int) -> None:
    ranges = split_layers(num_layers, pp)
    assert len(ranges) == pp
    assert ranges[0].start == 0 and ranges[-1].stop == num_layers
    assert all(a.stop == b.start for a, b in zip(ranges, ranges[1:], strict=False))
    sizes = [len(r) for r in ranges]
    assert max(sizes) - min(sizes) <= 1
    assert sizes == sorted(sizes, reverse=True)  # earlier stages take the extra layers


@pytest.mark.parametrize("pp", [0, -1, 79])
def test_split_layers_rejects_bad_pp(pp: int) -> None:
    with pytest.raises(ValueError):
        split_layers(78, pp)


def test_unknown_names_list_the_known_ones() -> None:
    with pytest.raises(ValueError) as err:
        get_model("nope")
    assert "nope" in str(err.value)
    for name in ("llama-3-8b", "glm-5.2", "minimax-m2.7"):
        assert name in str(err.value)
    with pytest.raises(ValueError, match="b300.*h200"):
        get_hardware("tpu")
    assert get_model("glm-5.2") is MODELS["glm-5.2"]
    assert get_hardware("h200") is HARDWARE["h200"]


def test_kv_bytes_per_token() -> None:
    # MLA caches the latent (512) plus the RoPE key (64), bf16.
    assert get_model("glm-5.2").kv_bytes_per_token(1) == (512 + 64) * 2
    assert get_model("glm-5.2").kv_bytes_per_token(20) == 20 * (512 + 64) * 2
    # Llama-3-8B: K and V, 8 KV heads x 128, bf16, 32 layers = the well-known 128 KiB per token.
    assert get_model("llama-3-8b").kv_bytes_per_token(32) == 128 * 1024
    assert get_model("minimax-m2.7").kv_bytes_per_token(1) == 2 * 8 * 128 * 2


def _model_totals(name: str) -> tuple[float, float]:
    m = get_model(name)
    params = [m.layer_params(i) for i in range(m.num_layers)]
    heads = 2.0 * m.embedding_params  # untied embedding + LM head
    return sum(p[0] for p in params) + heads, sum(p[1] for p in params) + heads


@pytest.mark.parametrize(
    "name,total,active",
    [
        ("llama-3-8b", 8.03e9, 8.03e9),  # Meta: 8.03B
        ("glm-5.2", 744e9, 40e9),  # GLM-5.2.json total_params_reported: ~744B total / 40B active
        ("minimax-m2.7", 229e9, 10e9),  # MiniMax-M2.7.json total_params 229B; ~10B active (MiniMax M2)
    ],
)
def test_parameter_counts_match_published(name: str, total: float, active: float) -> None:
    got_total, got_active = _model_totals(name)
    assert got_total == pytest.approx(total, rel=0.01)
    assert got_active == pytest.approx(active, rel=0.12)


def test_layer_params_dense_vs_moe() -> None:
    glm = get_model("glm-5.2")
    dense_total, dense_active = glm.layer_params(0)
    assert dense_total == dense_active  # first_k_dense layers run every weight
    moe_total, moe_active = glm.layer_params(3)
    # Inactive routed experts are the whole difference.
    assert moe_total - moe_active == (256 - 8) * 3 * 6144 * 2048
    with pytest.raises(ValueError):
        glm.layer_params(78)


def test_glm_indexer_layers() -> None:
    glm = get_model("glm-5.2")
    assert len(glm.index_full_layers) == 21
    assert [layer for layer in range(12) if glm.has_indexer(layer)] == [0, 1, 2, 6, 10]


# --- vendored numbers equal the shared data ---------------------------------------------------------------


def _load_json(name: str) -> dict[str, Any]:
    path = DATA / "models" / name
    if not path.exists():
        pytest.skip(f"{path} not present")
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def test_glm_matches_config() -> None:
    cfg = _load_json("GLM-5.2.json")
    m = get_model("glm-5.2")
    assert (m.num_layers, m.hidden_size, m.vocab_size) == (
        cfg["num_hidden_layers"], cfg["hidden_size"], cfg["vocab_size"])
    assert (m.num_heads, m.num_kv_heads, m.head_dim) == (
        cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"])
    assert (m.q_lora_rank, m.kv_lora_rank, m.qk_nope_head_dim, m.qk_rope_head_dim, m.v_head_dim) == (
        cfg["q_lora_rank"], cfg["kv_lora_rank"], cfg["qk_nope_head_dim"], cfg["qk_rope_head_dim"],
        cfg["v_head_dim"])
    assert (m.n_routed_experts, m.experts_per_token, m.moe_intermediate_size, m.n_shared_experts) == (
        cfg["n_routed_experts"], cfg["num_experts_per_tok"], cfg["moe_intermediate_size"],
        cfg["n_shared_experts"])
    assert (m.intermediate_size, m.first_k_dense, m.max_context) == (
        cfg["intermediate_size"], cfg["first_k_dense_replace"], cfg["max_position_embeddings"])
    assert m.first_k_dense == cfg["mlp_layer_types__summary"]["counts"]["dense"]
    assert (m.index_n_heads, m.index_head_dim, m.index_topk) == (
        cfg["index_n_heads"], cfg["index_head_dim"], cfg["index_topk"])
    assert len(m.index_full_layers) == cfg["indexer_types__summary"]["counts"]["full"]
    raw = DATA / "models" / "raw" / "zai-org--GLM-5.2_config.json"
    if raw.exists():
        types = json.loads(raw.read_text())["indexer_types"]
        assert m.index_full_layers == {i for i, t in enumerate(types) if t == "full"}


def test_minimax_matches_config() -> None:
    cfg = _load_json("MiniMax-M2.7.json")
    m = get_model("minimax-m2.7")
    assert (m.num_layers, m.hidden_size, m.vocab_size, m.max_context) == (
        cfg["num_hidden_layers"], cfg["hidden_size"], cfg["vocab_size"], cfg["max_position_embeddings"])
    assert (m.num_heads, m.num_kv_heads, m.head_dim) == (
        cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"])
    assert (m.n_routed_experts, m.experts_per_token, m.moe_intermediate_size) == (
        cfg["num_local_experts"], cfg["num_experts_per_tok"], cfg["intermediate_size"])
    assert cfg["shared_intermediate_size"] == 0 and m.n_shared_experts == 0
    assert cfg["quantization_config"]["quant_method"] == "fp8" and m.weight_bytes == 1.0


def _yaml_number(text: str, key: str) -> float:
    """The number after ``key:`` in a flat-enough YAML file (keys used here are unique in the file)."""
    match = re.search(rf"^\s*{re.escape(key)}:\s*([0-9.eE+-]+)", text, re.MULTILINE)
    assert match, f"{key} not found"
    return float(match.group(1))


def _yaml_nccl_mem(text: str) -> tuple[tuple[int, float], ...]:
    block = text.split("nccl_mem:", 1)[1]
    rows = re.findall(r"^\s+(\d+):\s*(\d+)", block.split("other_mem:", 1)[0], re.MULTILINE)
    return tuple((int(k), float(v)) for k, v in rows)


@pytest.mark.parametrize("name,filename", [("h200", "h200_sxm.yaml"), ("b300", "b300_sxm.yaml")])
def test_hardware_matches_yaml(name: str, filename: str) -> None:
    path = DATA / "perf" / filename
    if not path.exists():
        pytest.skip(f"{path} not present")
    text = path.read_text()
    hw = get_hardware(name)
    assert hw.dense_flops == _yaml_number(text, "bfloat16_tc_flops")
    assert hw.fp8_flops == _yaml_number(text, "fp8_tc_flops")
    assert hw.hbm_bytes_per_s == _yaml_number(text, "mem_bw")
    assert hw.hbm_efficiency == _yaml_number(text, "mem_bw_empirical_scaling_factor")
    assert hw.op_latency_s == _yaml_number(text, "mem_empirical_constant_latency")
    assert hw.mem_capacity_bytes == _yaml_number(text, "mem_capacity")
    assert hw.link_bytes_per_s == _yaml_number(text, "intra_node_bw")
    assert hw.p2p_latency_s == _yaml_number(text, "p2p_latency")
    assert hw.gpus_per_node == _yaml_number(text, "num_gpus_per_node")
    assert hw.reserve_bytes_per_gpu == _yaml_number(text, "other_mem")
    assert hw.nccl_mem_bytes == _yaml_nccl_mem(text)
