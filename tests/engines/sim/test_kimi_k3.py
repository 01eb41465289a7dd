"""The kimi-k3 profile: its layers and shapes against the shared config, its size, the deployment that fits
(one HGX B300 node), each stage's KV pool and what a state snapshot costs it - by hand."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from wavepp.runtime.engines.config import SimConfig
from wavepp.runtime.engines.sim.capacity import stage_memory
from wavepp.runtime.engines.sim.engine import SimEngine, state_specs
from wavepp.runtime.engines.sim.profiles import get_hardware, get_model, split_layers

DATA = Path(__file__).resolve().parents[3].parent / "shared" / "data"
K3 = get_model("kimi-k3")
B300 = get_hardware("b300")


def test_matches_the_config() -> None:
    path = DATA / "models" / "Kimi-K3.json"
    if not path.exists():
        pytest.skip(f"{path} not present")
    cfg = json.loads(path.read_text())["text_config"]
    linear = cfg["linear_attn_config"]
    assert (K3.num_layers, K3.hidden_size, K3.vocab_size, K3.max_context) == (
        cfg["num_hidden_layers"], cfg["hidden_size"], cfg["vocab_size"], cfg["max_position_embeddings"])
    assert (K3.q_lora_rank, K3.kv_lora_rank, K3.qk_nope_head_dim, K3.qk_rope_head_dim, K3.v_head_dim) == (
        cfg["q_lora_rank"], cfg["kv_lora_rank"], cfg["qk_nope_head_dim"], cfg["qk_rope_head_dim"], cfg["v_head_dim"])
    assert (K3.n_routed_experts, K3.experts_per_token, K3.n_shared_experts, K3.moe_intermediate_size) == (
        cfg["num_experts"], cfg["num_experts_per_token"], cfg["num_shared_experts"], cfg["moe_intermediate_size"])
    assert (K3.routed_hidden_size, K3.first_k_dense, K3.intermediate_size) == (
        cfg["routed_expert_hidden_size"], cfg["first_k_dense_replace"], cfg["intermediate_size"])
    assert (K3.linear_num_heads, K3.linear_head_dim, K3.linear_conv_kernel) == (
        linear["num_heads"], linear["head_dim"], linear["short_conv_kernel_size"])
    full = {i - 1 for i in linear["full_attn_layers"]}            # the config counts layers from 1
    assert K3.linear_layers == set(range(93)) - full
    assert len(K3.linear_layers) == linear["kda_layers_count"] == 69
    assert K3.attention_output_gate == cfg["mla_use_output_gate"]


def test_size_and_the_deployment_that_fits() -> None:
    """2.78T parameters (2.8T reported); 1.56 TB as served (MXFP4 routed experts, the rest bf16): more than an
    H200 node's 8 x 141 GiB, about two thirds of a B300 node's 8 x 268.6 GiB - PP4 x 2 GPUs a stage."""
    params = sum(K3.layer_params(i)[0] for i in range(93)) + 2 * K3.embedding_params
    served = sum(K3.layer_weight_bytes(i) for i in range(93)) + 2 * K3.embedding_params * 2
    assert params == pytest.approx(2.78e12, rel=0.005)
    routed = 92 * 896 * 3 * 3584 * 3072
    assert served == pytest.approx(routed * 4.25 / 8 + (params - routed) * 2, rel=1e-9)
    assert served > 8 * get_hardware("h200").mem_capacity_bytes
    assert served < 0.7 * 8 * B300.mem_capacity_bytes


def test_stage_memory_by_hand() -> None:
    """Stage 3 (layers 70-92: MLA on 71, 75, 79, 83, 87, 91, 92; 16 KDA layers) on 2 GPUs."""
    layers = split_layers(93, 4)[3]
    assert layers == range(70, 93) and K3.attention_layers(layers) == 7
    mem = stage_memory(K3, B300, 4, 2, 3)
    assert mem.kv_bytes_per_token == 7 * (512 + 64) * 2               # the latent, whole on each TP rank
    weights = (sum(K3.layer_weight_bytes(i) for i in layers) + K3.embedding_params * 2) / 2
    assert mem.weights == pytest.approx(weights)
    pool = (B300.mem_capacity_bytes - weights - mem.activations - mem.nccl - mem.other) * 0.9
    assert mem.kv_tokens == int(pool // (7 * 576 * 2))
    # One sequence's state there: 16 layers x (48 heads x 128 x 128 fp32 + 3 x 48 x 128 x 3 bf16 conv tail).
    assert K3.state_bytes_per_sequence(layers, 2) == 16 * (48 * 128 * 128 * 4 + 3 * 3 * 48 * 128 * 2)


def test_a_snapshot_costs_the_blocks_its_bytes_fill() -> None:
    specs = state_specs(K3, 4, 2, 64, 16384)
    assert specs is not None
    for spec, layers in zip(specs, split_layers(93, 4), strict=True):
        assert spec is not None and spec.interval_blocks == 256
        block = K3.attention_layers(layers) * 576 * 2 * 64
        assert (spec.slot_blocks - 1) * block < K3.state_bytes_per_sequence(layers, 2) <= spec.slot_blocks * block
    assert state_specs(get_model("glm-5.2"), 4, 2, 64, 16384) is None


def test_the_engine_builds_hybrid_stages_and_the_knob_sets_their_interval() -> None:
    engine = SimEngine(SimConfig("kimi-k3", "b300", 4, kv_blocks=[4096]))
    parts = engine.build()
    assert [h.resume_step for h in parts.handles] == [256] * 4            # the default, 16384 tokens
    for h in parts.handles:
        h.set_snapshot_interval(8192 + 63)                                  # rounded down to whole blocks
    assert [h.resume_step for h in parts.handles] == [128] * 4
    glm = SimEngine(SimConfig("glm-5.2", "b300", 4, kv_blocks=[4096])).build()
    glm.handles[0].set_snapshot_interval(8192)                              # no state layers: nothing to set
    assert glm.handles[0].resume_step == 1
