"""Stage KV capacity as TensorRT-LLM's KvCacheCreator sizes it: the fraction of what weights and runtime leave."""

from __future__ import annotations

import pytest

from wavepp.runtime.engines.config import SimConfig
from wavepp.runtime.engines.sim.capacity import (
    activation_bytes,
    kv_bytes_per_token_per_gpu,
    stage_memory,
    stage_weight_bytes,
)
from wavepp.runtime.engines.sim.engine import SimEngine
from wavepp.runtime.engines.sim.profiles import get_hardware, get_model


def test_glm_stage_one_on_b300_by_hand() -> None:
    """GLM-5.2, PP4 x TP2/EP2 on B300, stage 1 = layers 20-39 (all MoE; 22, 26, 30, 34, 38 compute the indexer).

    Parameters of one MoE layer (profiles.py, GLM-5.2 config):
      attention  q_a 6144*2048 + q_a_norm 2048 + q_b 2048*64*256       =  46,139,392
                 kv_a 6144*576 + kv_a_norm 512                          =   3,539,456
                 kv_b 512*64*(192+256)                                  =  14,680,064
                 o 64*256*6144                                          = 100,663,296
                 two RMSNorms 2*6144                                    =      12,288  -> 165,034,496
      indexer    wq_b 2048*32*128 + wk 6144*128 + k_norm 256 + weights_proj 6144*32 = 9,371,904 (full layers)
      MoE        router 6144*256 = 1,572,864; shared + 256 routed experts 257 * 3*6144*2048 = 9,701,425,152
      layer      9,868,032,512 without the indexer, 9,877,404,416 with it
    Stage: 15 * 9,868,032,512 + 5 * 9,877,404,416 = 197,407,509,760 fp8 bytes; per GPU 98,703,754,880.
    Activations (aiconfigurator's TRT-LLM model, max_num_tokens 16384, tp 2): 2*16384*(64*192)*13
      = 5,234,491,392, + MoE block-scale workspace 16384*12288*256*8/2/128*4 = 6,442,450,944 -> 11,676,942,336.
    b300_sxm.yaml: mem_capacity 288,400,343,040; misc.nccl_mem[2] 358,612,992; misc.other_mem 3,758,096,384.
    Pool per GPU: (288,400,343,040 - 98,703,754,880 - 11,676,942,336 - 358,612,992 - 3,758,096,384) * 0.9
      = 173,902,936,448 * 0.9 = 156,512,642,803.2 bytes.
    Per token per GPU (MLA: the whole latent on every TP rank): 20 layers * 576 * 2 bytes = 23,040,
      + indexer keys 5 * (128 + 4) = 660 -> 23,700 bytes; 156,512,642,803.2 / 23,700 = 6,603,908.98 tokens.
    """
    m, hw = get_model("glm-5.2"), get_hardware("b300")
    layers = range(20, 40)
    assert stage_weight_bytes(m, layers, False, False) == 197_407_509_760
    assert activation_bytes(m, 2) == 11_676_942_336
    assert kv_bytes_per_token_per_gpu(m, layers, 2) == 23_700
    mem = stage_memory(m, hw, 4, 2, 1)
    assert mem.weights == 98_703_754_880
    assert mem.kv_pool == pytest.approx(156_512_642_803.2)
    assert mem.kv_tokens == 6_603_908
    # fp8 KV: 20 * 576 * 1 + the indexer keys, which stay 132 bytes whatever the KV dtype.
    fp8 = stage_memory(m.with_kv_dtype("fp8"), hw, 4, 2, 1)
    assert fp8.kv_bytes_per_token == 20 * 576 + 660
    assert fp8.kv_tokens == int(156_512_642_803.2 // (20 * 576 + 660))


def test_minimax_splits_its_kv_heads_over_tp() -> None:
    """MiniMax-M2.7 stage 1 (layers 16-31), TP2: each GPU holds 4 of the 8 KV heads, K and V of 128 in bf16:
    16 * 2 * 4 * 128 * 2 = 32,768 bytes per token per GPU. Activations 2*16384*(48*128)*13 = 2,617,245,696
    (the generic MoE family has no block-scale workspace in aiconfigurator's model)."""
    m, hw = get_model("minimax-m2.7"), get_hardware("b300")
    mem = stage_memory(m, hw, 4, 2, 1)
    assert mem.kv_bytes_per_token == 32_768
    assert mem.activations == 2_617_245_696
    weights = stage_weight_bytes(m, range(16, 32), False, False) / 2
    expected = (288_400_343_040 - weights - 2_617_245_696 - 358_612_992 - 3_758_096_384) * 0.9 // 32_768
    assert mem.kv_tokens == int(expected)


def test_first_and_last_stages_hold_the_embedding_and_lm_head() -> None:
    m = get_model("minimax-m2.7")
    middle = stage_weight_bytes(m, range(32, 47), False, False)
    assert stage_weight_bytes(m, range(32, 47), True, False) - middle == 200064 * 3072 * 2  # bf16 embedding
    assert stage_weight_bytes(m, range(32, 47), True, True) - middle == 2 * 200064 * 3072 * 2


def test_sim_engine_capacities_come_from_the_stage_memory() -> None:
    engine = SimEngine(SimConfig("glm-5.2", "b300", 4, block_size=64, cost_model="analytic"))
    tokens = [stage_memory(get_model("glm-5.2"), get_hardware("b300"), 4, 2, s).kv_tokens for s in range(4)]
    assert engine.capacities == [t // 64 for t in tokens]
    fp8 = SimEngine(SimConfig("glm-5.2", "b300", 4, block_size=64, cost_model="analytic", kv_dtype="fp8"))
    assert all(1.9 < f / b < 2.0 for f, b in zip(fp8.capacities, engine.capacities, strict=True))


def test_no_room_is_zero_and_bad_fraction_is_an_error() -> None:
    assert stage_memory(get_model("glm-5.2"), get_hardware("h200"), 1, 1, 0).kv_tokens == 0  # 744 GB on one GPU
    with pytest.raises(ValueError):
        stage_memory(get_model("glm-5.2"), get_hardware("b300"), 4, 2, 0, fraction=0.0)
    with pytest.raises(ValueError):
        stage_memory(get_model("glm-5.2"), get_hardware("b300"), 4, 2, 4)
