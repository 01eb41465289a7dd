"""Table cost model: a stage is the sum of its kernels as the tables give them; the default switch; errors."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from wavepp.runtime.engines.config import SimConfig
from wavepp.runtime.engines.sim.costmodel import ChunkShape
from wavepp.runtime.engines.sim.engine import SimEngine
from wavepp.runtime.engines.sim.perf_interp import TableCoverageError
from wavepp.runtime.engines.sim.profiles import get_hardware, get_model
from wavepp.runtime.engines.sim.table_choices import Choices
from wavepp.runtime.engines.sim.table_cost import TableCostModel, _Kind, load_table_cost_model

# repo_root.parent / "shared" / "data" / "perf": tests/engines/sim/<this file> -> parents[3] is the repo root.
PERF = Path(__file__).resolve().parents[3].parent / "shared" / "data" / "perf"
needs_tables = pytest.mark.skipif(not (PERF / "b300_sxm").is_dir(), reason="../shared/data/perf is not present")
RC20 = PERF / "b300_sxm" / "trtllm" / "1.3.0rc20"


def _row(table: str, **where: object) -> float:
    """The one row of ``table`` matching ``where``, in seconds (the table is in ms)."""
    import pyarrow.parquet as pq

    rows = pq.read_table(RC20 / f"{table}.parquet", columns=["latency"],
                         filters=[(k, "=", v) for k, v in where.items()]).column("latency").to_pylist()
    assert len(rows) == 1, (table, where, rows)
    return rows[0] * 1e-3


@needs_tables
def test_minimax_stage_is_the_sum_of_its_kernels_at_a_grid_point() -> None:
    """MiniMax-M2.7, PP4 x TP2 on B300, stage 1 (16 MoE layers), one 4096-token chunk from position 0."""
    m, hw = get_model("minimax-m2.7"), get_hardware("b300")
    x, h = 4096, 3072
    gemm = _row("gemm_perf", gemm_dtype="fp8_block", m=x, n=24 * 128 + 2 * 128 * 4, k=h)  # qkv: 24 q + 4 kv heads
    gemm += _row("gemm_perf", gemm_dtype="fp8_block", m=x, n=h, k=24 * 128)  # o_proj
    gemm += _row("gemm_perf", gemm_dtype="bfloat16", m=x, n=256, k=h)  # router
    moe = _row("moe_perf", moe_dtype="fp8_block", distribution="power_law_1.2", topk=8, num_experts=256,
               hidden_size=h, inter_size=1536, moe_tp_size=1, moe_ep_size=2, num_tokens=x)
    attn = _row("context_attention_perf", num_heads=24, num_key_value_heads=4, head_dim=128, window_size=0,
                attn_dtype="bfloat16", kv_cache_dtype="bfloat16", isl=x, batch_size=1)
    # x*h = 12,582,912 elements lies between the 2^23 and 2^24 rows: linear in raw latency (FORMAT §5.5).
    lo = _row("custom_allreduce_perf", allreduce_dtype="bfloat16", num_gpus=2, message_size=2**23)
    hi = _row("custom_allreduce_perf", allreduce_dtype="bfloat16", num_gpus=2, message_size=2**24)
    allreduce = lo + (hi - lo) * (x * h - 2**23) / 2**23
    # b300_sxm.yaml: mem_bw 7.75e12 x 0.8, 3 us per element-wise op; add_norm moves 8h bytes per token.
    add_norm = 8 * h * x / (7.75e12 * 0.8) + 3e-6
    extras = 1.1 * 3 * 3e-6  # RoPE, KV write, QK-norm fused into attention
    per_layer = gemm + moe + attn + extras + 2 * allreduce + 2 * add_norm
    table = TableCostModel(m, hw, pp=4, gpus_per_stage=2, perf_dir=PERF)
    assert len(table.stage_layers(1)) == 16
    assert table.step_time(1, [ChunkShape(0, x)]) == pytest.approx(16 * per_layer, rel=1e-12)


@needs_tables
@pytest.mark.parametrize("model", ["glm-5.2", "minimax-m2.7"])
@pytest.mark.parametrize("hardware", ["b300", "h200"])
def test_step_time_grows_with_new_and_cached_tokens(model: str, hardware: str) -> None:
    table = load_table_cost_model(model, hardware, 4, 2, PERF)
    xs = [1, 64, 1000, 1024, 3000, 4096, 8192, 12000, 16384, 20000]
    for lo in (0, 5000, 32768, 131072):
        times = [table.step_time(1, [ChunkShape(lo, x)]) for x in xs]
        assert times == sorted(times), (lo, times)
    # Along L only coarsely: the measured per-token cost of a module is not monotone everywhere (the H200
    # DSA module takes 1.95 ms per 1K tokens at 10K but 1.82 at 12K), and the prefix correction follows it.
    for x in (1024, 8192):
        times = [table.step_time(1, [ChunkShape(lo, x)]) for lo in (0, 32768, 131072)]
        assert times == sorted(times), (x, times)


@needs_tables
@pytest.mark.parametrize(("model", "pp", "tp"), [("glm-5.2", 4, 1), ("glm-5.2", 3, 2), ("minimax-m2.7", 4, 2),
                                                 ("kimi-k3", 4, 8)])
def test_every_stage_at_once_prices_each_stage_as_alone(model: str, pp: int, tp: int) -> None:
    """step_times (each kind of layer priced once for the stages) equals step_time stage by stage, to the bit,
    whatever the model's kinds of layers (MoE, indexer reuse, a hybrid's linear layers) and the wave."""
    waves = [[ChunkShape(0, 4096)], [ChunkShape(32768, 1000), ChunkShape(0, 4096), ChunkShape(32768, 1000)],
             [ChunkShape(131072 - 8192, 8192)], [ChunkShape(512, 1)], []]
    for wave in waves:
        alone = [load_table_cost_model(model, "b300", pp, tp, PERF).step_time(s, wave) for s in range(pp)]
        fresh = TableCostModel(get_model(model), get_hardware("b300"), pp, tp, PERF)   # memos empty
        assert fresh.step_times(wave) == alone, (model, wave)
    if model != "minimax-m2.7":   # stages of other kinds of layers than stage 0's: the check is not vacuous
        table = load_table_cost_model(model, "b300", pp, tp, PERF)
        assert len({p.kinds for p in table._stages}) > 1


@needs_tables
def test_glm_layers_that_reuse_the_indexer_cost_less_at_long_context() -> None:
    """GLM-5.2 stage 1 holds 5 layers that compute the DSA indexer and 15 that reuse it; at L = 128K the
    reused ones are cheaper, so the stage is cheaper than if every layer ran the measured GLM-5 module."""
    table = load_table_cost_model("glm-5.2", "b300", 4, 2, PERF)
    wave = [ChunkShape(131072, 4096)]
    full, shared = (table._attention_op(kind, 131072, 4096, 1) for kind in sorted(
        (k for k, _ in table._stages[1].kinds), key=lambda k: k.indexer, reverse=True))
    assert shared < full
    at_zero = [table._attention_op(kind, 0, 4096, 1) for kind, _ in table._stages[1].kinds]
    dsa_row = _row("dsa_context_module_perf", model="zai-org/GLM-5", mla_dtype="bfloat16", kv_cache_dtype="bfloat16",
                   gemm_type="fp8_block", step=0, num_heads=32, isl=4096, batch_size=1)
    assert max(at_zero) == pytest.approx(dsa_row, rel=1e-12)  # a full layer from position 0 is the row itself
    assert table.step_time(1, wave) > 0


@needs_tables
def test_dsa_prices_the_new_tokens_at_the_exact_prefix() -> None:
    """GLM-5.2 on B300, TP2 (32 heads per GPU): 4096 new tokens after 128 cached cost the module's step=128 row
    itself; after 32K cached, that row's utilisation is held against the module's roofline (the table's prefix
    axis holds 0 and 128). No (L+x)² prefix correction of the row at L+x."""
    table = load_table_cost_model("glm-5.2", "b300", 4, 2, PERF)
    full = _Kind(moe=True, indexer=True)
    row = _row("dsa_context_module_perf", model="zai-org/GLM-5", mla_dtype="bfloat16", kv_cache_dtype="bfloat16",
               gemm_type="fp8_block", step=128, num_heads=32, isl=4096, batch_size=1)
    assert table._attention_op(full, 128, 4096, 1) == pytest.approx(row, rel=1e-12)
    sol = table._dsa_sol
    held = row * sol(32, 32768, 4096, 1) / sol(32, 128, 4096, 1)
    assert table._attention_op(full, 32768, 4096, 1) == pytest.approx(held, rel=1e-12)
    # A layer that reuses the top-k runs no indexer: its share of the roofline is not charged.
    shared = table._attention_op(_Kind(moe=True, indexer=False), 32768, 4096, 1)
    assert shared == pytest.approx(held * sol(32, 32768, 4096, 1, indexer=False) / sol(32, 32768, 4096, 1))
    assert shared < 0.7 * held  # at 32K the indexer's scores are a large part of a full layer


@needs_tables
def test_aiconfigurators_choices_charge_more() -> None:
    """Every layer computing the indexer, an unsplit shared expert and bf16-GEMM module rows all cost more."""
    ours = load_table_cost_model("glm-5.2", "b300", 4, 2, PERF)
    theirs = load_table_cost_model("glm-5.2", "b300", 4, 2, PERF, choices=Choices.aiconfigurator())
    for lo, x in ((0, 4096), (131072, 4096)):
        assert ours.step_time(1, [ChunkShape(lo, x)]) < theirs.step_time(1, [ChunkShape(lo, x)])


@needs_tables
def test_fp8_kv_reads_the_fp8_cache_rows() -> None:
    """kv_dtype fp8 swaps only the attention rows for the fp8-cache ones (bf16 compute): per layer the step
    changes by exactly the rows' difference. H200's DSA table has no fp8-cache rows: the bf16 ones stand in."""
    bf16 = load_table_cost_model("minimax-m2.7", "b300", 4, 2, PERF)
    fp8 = load_table_cost_model("minimax-m2.7", "b300", 4, 2, PERF, kv_dtype="fp8")
    rows = {kv: _row("context_attention_perf", num_heads=24, num_key_value_heads=4, head_dim=128, window_size=0,
                     attn_dtype="bfloat16", kv_cache_dtype=kv, isl=4096, batch_size=1) for kv in ("bfloat16", "fp8")}
    wave = [ChunkShape(0, 4096)]
    assert fp8.step_time(1, wave) - bf16.step_time(1, wave) == pytest.approx(16 * (rows["fp8"] - rows["bfloat16"]))
    glm = {kv: load_table_cost_model("glm-5.2", "b300", 4, 2, PERF, kv_dtype=kv) for kv in ("bf16", "fp8")}
    assert glm["fp8"].step_time(1, wave) < glm["bf16"].step_time(1, wave)
    h200 = {kv: load_table_cost_model("glm-5.2", "h200", 4, 2, PERF, kv_dtype=kv) for kv in ("bf16", "fp8")}
    assert h200["fp8"].step_time(1, wave) == h200["bf16"].step_time(1, wave)
    with pytest.raises(ValueError, match="unknown KV dtype"):
        SimEngine(SimConfig("glm-5.2", "b300", 4, kv_dtype="int8", perf_dir=str(PERF)))


@needs_tables
def test_equal_chunks_share_one_batched_lookup() -> None:
    table = load_table_cost_model("minimax-m2.7", "b300", 4, 2, PERF)
    one = table.step_time(1, [ChunkShape(0, 1024)])
    four = table.step_time(1, [ChunkShape(0, 1024)] * 4)
    assert one < four < 4 * one  # batched kernels amortise; the token ops see 4096 tokens


@needs_tables
def test_table_is_the_default_where_the_tables_cover(tmp_path: Path) -> None:
    assert SimEngine(SimConfig("glm-5.2", "b300", 4, perf_dir=str(PERF))).cost_model_name == "table"
    assert SimEngine(SimConfig("minimax-m2.7", "h200", 4, perf_dir=str(PERF))).cost_model_name == "table"
    llama = SimEngine(SimConfig("llama-3-8b", "b300", 4, perf_dir=str(PERF))).cost_model_name
    assert llama == "analytic (no kernel tables for model 'llama-3-8b' (tables: glm-5.2, minimax-m2.7, kimi-k3))"
    assert SimEngine(SimConfig("kimi-k3", "b300", 4, perf_dir=str(PERF))).cost_model_name == "table"
    with pytest.raises(ValueError, match="leaves no room for KV cache"):   # 1.56 TB of weights > 8 x 141 GiB
        SimEngine(SimConfig("kimi-k3", "h200", 4, perf_dir=str(PERF)))
    assert SimEngine(SimConfig("glm-5.2", "b300", 4,
                               perf_dir=str(tmp_path))).cost_model_name.startswith("analytic (no kernel")
    assert SimEngine(SimConfig("glm-5.2", "b300", 4, cost_model="analytic")).cost_model_name == "analytic"
    with pytest.raises(TableCoverageError):
        SimEngine(SimConfig("glm-5.2", "b300", 4, cost_model="table", perf_dir=str(tmp_path)))


def test_missing_perf_dir_is_one_line_error(tmp_path: Path) -> None:
    with pytest.raises(TableCoverageError) as err:
        TableCostModel(get_model("glm-5.2"), get_hardware("b300"), 4, 2, perf_dir=tmp_path)
    assert "no kernel tables at" in str(err.value) and "\n" not in str(err.value)
    proc = subprocess.run([sys.executable, "-m", "wavepp", "bench", "--engine", "sim", "--cost-model", "table",
                           "--perf-dir", str(tmp_path / "nowhere"), "--quiet"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stdout == ""
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("wavepp: error: no kernel tables at"), proc.stderr


@needs_tables
def test_missing_table_is_one_line_error(tmp_path: Path) -> None:
    version = tmp_path / "b300_sxm" / "trtllm" / "1.3.0rc20"
    version.mkdir(parents=True)
    for f in RC20.glob("*.parquet"):
        if f.name != "moe_perf.parquet":
            (version / f.name).symlink_to(f)
    proc = subprocess.run([sys.executable, "-m", "wavepp", "cost-table", "--model", "glm-5.2",
                           "--perf-dir", str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stdout == ""
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and "moe_perf.parquet is missing" in lines[0], proc.stderr
