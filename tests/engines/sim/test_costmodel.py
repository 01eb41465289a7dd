"""Analytic cost model: behaviour checked against hand-derived roofline figures."""

from __future__ import annotations

import pytest

from wavepp.runtime.engines.sim.costmodel import AnalyticCostModel, ChunkShape, CostModel, _causal_pairs
from wavepp.runtime.engines.sim.profiles import get_hardware, get_model


def _model(name: str, hw: str, pp: int, gpus_per_stage: int = 1) -> AnalyticCostModel:
    return AnalyticCostModel(get_model(name), get_hardware(hw), pp, gpus_per_stage)


SETUPS = [("llama-3-8b", "h200", 2, 1), ("glm-5.2", "b300", 4, 2), ("minimax-m2.7", "b300", 4, 1)]


def test_implements_protocol() -> None:
    cm: CostModel = _model("llama-3-8b", "h200", 2)
    assert cm.num_stages == 2


@pytest.mark.parametrize("setup", SETUPS)
def test_grows_with_tokens_and_context(setup: tuple[str, str, int, int]) -> None:
    cm = _model(*setup)
    for stage in (0, cm.num_stages - 1):
        by_x = [cm.step_time(stage, [ChunkShape(4096, x)]) for x in (256, 1024, 4096, 16384)]
        assert by_x == sorted(by_x) and by_x[0] < by_x[-1], by_x
        by_ctx = [cm.step_time(stage, [ChunkShape(ctx, 2048)]) for ctx in (0, 4096, 32768, 131072)]
        assert all(a < b for a, b in zip(by_ctx, by_ctx[1:], strict=False)), by_ctx


def test_big_chunk_is_compute_bound() -> None:
    # Llama-3-8B on H200, per layer at x=4096: linear 2*218.1e6*4096 = 1.79e12 FLOP at 989e12*0.6 -> 3.01 ms,
    # attention 4*32*128*(4096*4097/2) = 1.37e11 at 989e12*0.5 -> 0.28 ms. At x=8192: 6.03 + 1.11 ms.
    # Ratio ~2.16: linear work doubles, causal attention quadruples.
    cm = _model("llama-3-8b", "h200", 2)
    t1 = cm.step_time(0, [ChunkShape(0, 4096)])
    t2 = cm.step_time(0, [ChunkShape(0, 8192)])
    assert 1.9 < t2 / t1 < 2.5, (t1, t2)
    # GLM-5.2: DSA caps keys per query at 2048, so only the (cheap) indexer stays quadratic.
    glm = _model("glm-5.2", "b300", 4, 2)
    g1 = glm.step_time(0, [ChunkShape(0, 8192)])
    g2 = glm.step_time(0, [ChunkShape(0, 16384)])
    assert 1.9 < g2 / g1 < 2.5, (g1, g2)


def test_tiny_chunk_is_weight_bandwidth_bound() -> None:
    # Llama-3-8B stage 0 of pp2: 16 layers x 218.1e6 params x 2 bytes = 6.98 GB at 4.8e12*0.8 B/s -> 1.82 ms,
    # plus 20 us launch and 16*7*3 us op latency -> ~2.17 ms, whatever the (tiny) token count.
    cm = _model("llama-3-8b", "h200", 2)
    t1 = cm.step_time(0, [ChunkShape(0, 1)])
    t32 = cm.step_time(0, [ChunkShape(0, 32)])
    assert t32 / t1 < 1.02, (t1, t32)
    assert t1 == pytest.approx(16 * 218.1e6 * 2 / (4.8e12 * 0.8) + 20e-6 + 16 * 7 * 3e-6, rel=0.01)
    # MoE: once tokens*top_k >= 256 every expert is read anyway, so 64 and 128 tokens cost about the same;
    # with one token only 8 of 256 experts are read.
    mm = _model("minimax-m2.7", "b300", 4)
    m64 = mm.step_time(1, [ChunkShape(0, 64)])
    assert mm.step_time(1, [ChunkShape(0, 128)]) / m64 < 1.1
    assert mm.step_time(1, [ChunkShape(0, 1)]) < 0.5 * m64


@pytest.mark.parametrize("x", [1, 8192])
def test_lm_head_makes_last_stage_dearer(x: int) -> None:
    # MiniMax-M2.7 62 layers over pp4 -> 16, 16, 15, 15: stages 2 and 3 hold equal, identical layers.
    cm = _model("minimax-m2.7", "b300", 4)
    assert len(cm.stage_layers(2)) == len(cm.stage_layers(3))
    middle = cm.step_time(2, [ChunkShape(1024, x)])
    last = cm.step_time(3, [ChunkShape(1024, x)])
    assert last > middle, (middle, last)


def test_glm_stage_time_is_plausible() -> None:
    cm = _model("glm-5.2", "b300", 4, 2)
    t = cm.step_time(0, [ChunkShape(32768, 8192)])
    assert 0.010 < t < 1.0, f"glm-5.2 b300 pp4 tp2 stage 0, L=32768 x=8192: {t * 1e3:.2f} ms"


def test_split_chunks_cost_less_attention() -> None:
    # Two 4096-token chunks each after 32768 tokens see fewer keys than one 8192-token chunk
    # (no causal triangle across the chunks), with the same linear work.
    cm = _model("minimax-m2.7", "b300", 4)
    one = cm.step_time(0, [ChunkShape(32768, 8192)])
    two = cm.step_time(0, [ChunkShape(32768, 4096)] * 2)
    assert two < one


def test_causal_pairs_match_brute_force() -> None:
    for topk in (None, 1, 3, 8):
        for n in range(0, 20):
            expected = sum(min(p + 1, topk) if topk else p + 1 for p in range(n))
            assert _causal_pairs(n, topk) == expected


def test_empty_wave_and_bad_inputs() -> None:
    cm = _model("llama-3-8b", "h200", 2)
    assert cm.step_time(0, []) == 0.0
    with pytest.raises(ValueError):
        cm.step_time(2, [ChunkShape(0, 1)])
    with pytest.raises(ValueError):
        cm.step_time(-1, [ChunkShape(0, 1)])
    with pytest.raises(ValueError):
        ChunkShape(0, 0)
    with pytest.raises(ValueError):
        AnalyticCostModel(get_model("llama-3-8b"), get_hardware("h200"), 2, gpus_per_stage=0)


def test_transfer_time() -> None:
    cm = _model("glm-5.2", "b300", 4, 2)
    # TensorRT-LLM sends hidden_states and residual, one NCCL send each: per tensor 8192 tokens x 6144 hidden
    # x 2 bytes = 100,663,296 B over b300_sxm.yaml's intra_node_bw 900e9 B/s = 111.85 us, + p2p_latency 10 us;
    # two of them: 243.70 us. (aiconfigurator: one tensor over inter_node_bw 100e9 + 10 us = 1016.6 us.)
    assert cm.transfer_time(0, 8192) == pytest.approx(2 * (10e-6 + 8192 * 6144 * 2 / 900e9))
    assert cm.transfer_time(0, 8192) == pytest.approx(243.696e-6, rel=1e-5)
    h200 = _model("minimax-m2.7", "h200", 4, 2)  # 4096 x 3072 x 2 B = 25,165,824 B at 450e9 B/s = 55.92 us
    assert h200.transfer_time(1, 4096) == pytest.approx(2 * (10e-6 + 25_165_824 / 450e9))
    assert cm.transfer_time(3, 8192) == 0.0  # the last stage sends nothing on
    with pytest.raises(ValueError):
        cm.transfer_time(4, 1)


def test_kv_capacity() -> None:
    # Llama-3-8B on one H200 (tests/engines/sim/test_capacity.py has the arithmetic of a GLM-5.2 stage): the
    # pool is 0.9 of what weights (8.03e9 params * 2 B), activations of a 16384-token forward
    # (2 * 16384 * 4096 * 11, aiconfigurator's LLAMA coefficient at tp 1) and the 3.76e9 B runtime reserve
    # leave, over 128 KiB per token -> ~0.89M tokens.
    cm = _model("llama-3-8b", "h200", 1)
    act = 2 * 16384 * 4096 * 11
    expected = (151397597184 - cm.stage_weight_bytes(0) - act - 3758096384) * 0.9 / (128 * 1024)
    assert cm.stage_kv_capacity_tokens(0) == int(expected)
    assert 0.85e6 < expected < 0.95e6
    # GLM-5.2 (~744 GB in fp8) cannot fit one H200: no room, not a negative count.
    assert _model("glm-5.2", "h200", 1).stage_kv_capacity_tokens(0) == 0
    glm1 = _model("glm-5.2", "b300", 4, 1)
    glm2 = _model("glm-5.2", "b300", 4, 2)
    for stage in range(4):
        assert glm2.stage_kv_capacity_tokens(stage) > glm1.stage_kv_capacity_tokens(stage) >= 0
        assert glm2.stage_kv_capacity_tokens(stage, 0.5) < glm2.stage_kv_capacity_tokens(stage)
    with pytest.raises(ValueError):
        glm2.stage_kv_capacity_tokens(0, 0.0)


def test_the_executor_remembers_step_times_as_the_model_gives_them() -> None:
    from wavepp.runtime.engines.sim import executor as ex

    calls: list[tuple[int, tuple[ChunkShape, ...]]] = []

    class Counting:
        num_stages = 2

        def step_time(self, stage: int, chunks: list[ChunkShape]) -> float:
            calls.append((stage, tuple(chunks)))
            return 0.001 * (stage + 1) * sum(c.tokens for c in chunks)

        def step_times(self, chunks: list[ChunkShape]) -> list[float]:
            return [self.step_time(s, chunks) for s in range(self.num_stages)]

        def transfer_time(self, stage: int, num_tokens: int) -> float:
            return 0.0

    sim = ex.SimExecutor(Counting())  # type: ignore[arg-type]
    wave = [(0, 100), (512, 28)]
    assert sim.step_seconds(1, wave) == pytest.approx(0.256) and len(calls) == 2         # every stage at once
    assert sim.step_seconds(1, list(wave)) == pytest.approx(0.256) and len(calls) == 2   # priced once
    assert sim.step_seconds(0, wave) == pytest.approx(0.128) and len(calls) == 2
    sim.time_scale, sim.step_fit = 2.0, [(1.0, 0.0), (0.5, 0.01)]                          # applied after
    assert sim.step_seconds(1, wave) == pytest.approx(0.256 * 2 * 0.5 + 0.01) and len(calls) == 2
    for n in range(ex.STEP_MEMO + 1):                                                      # bounded
        sim.step_seconds(0, [(n, 1)])
    assert len(sim._steps) <= ex.STEP_MEMO
