"""Tensor/expert-parallel deployments: one stage over the node's 8 GPUs, all-reduces priced from the tables -
NCCL's checked by hand against nccl_perf - and the bench laying a TEP policy's engine out by itself."""

from __future__ import annotations

from pathlib import Path

import pytest

from wavepp.runtime.bench.runs import BenchConfig, laid_out, run_one
from wavepp.runtime.engines.config import SimConfig
from wavepp.runtime.engines.sim.costmodel import ChunkShape
from wavepp.runtime.engines.sim.engine import SimEngine
from wavepp.runtime.engines.sim.table_choices import Choices
from wavepp.runtime.engines.sim.table_cost import load_table_cost_model
from wavepp.runtime.mechanisms.topology import TEP_NCCL, TensorExpert
from wavepp.runtime.policies import get_policy
from wavepp.runtime.sources.workloads import parse_workload

PERF = Path(__file__).resolve().parents[3].parent / "shared" / "data" / "perf"
pytestmark = pytest.mark.skipif(not (PERF / "b300_sxm").is_dir(), reason="../shared/data/perf is not present")


def test_nccl_all_reduce_by_hand() -> None:
    """4096 tokens x 7168 hidden = 29,360,128 bf16 elements over 8 B300 GPUs: linear between the NCCL 2.27 rows
    at 2^24 and 2^25 elements (the version b300_sxm.yaml names), and each layer's two all-reduces are the whole
    difference between the NCCL-priced and the TensorRT-LLM-kernel-priced TEP step."""
    import pyarrow.parquet as pq

    rows = pq.read_table(PERF / "b300_sxm" / "nccl" / "2.27" / "nccl_perf.parquet",
                         filters=[("op_name", "=", "all_reduce"), ("nccl_dtype", "=", "half"),
                                  ("num_gpus", "=", 8)]).to_pylist()
    lat = {}
    for r in rows:
        lat.setdefault(r["message_size"], r["latency"])             # first occurrence of a key (FORMAT §4)
    size, lo, hi = 4096 * 7168, 1 << 24, 1 << 25
    by_hand = (lat[lo] + (lat[hi] - lat[lo]) * (size - lo) / (hi - lo)) * 1e-3
    nccl = load_table_cost_model("kimi-k3", "b300", 1, 8, PERF, Choices(comm="nccl"))
    custom = load_table_cost_model("kimi-k3", "b300", 1, 8, PERF, Choices(comm="custom"))
    assert nccl._allreduce is not None and custom._allreduce is not None
    assert nccl._allreduce(size) == pytest.approx(by_hand, rel=1e-9)
    wave = [ChunkShape(0, 4096)]
    difference = nccl.step_time(0, wave) - custom.step_time(0, wave)
    assert difference == pytest.approx(93 * 2 * (by_hand - custom._allreduce(size)), rel=1e-6)


def test_the_bench_lays_a_tep_policy_out_on_one_stage_of_every_gpu() -> None:
    engine = SimEngine(SimConfig("kimi-k3", "b300", 4, perf_dir=str(PERF)))
    assert engine.gpus_per_stage == 2 and laid_out(engine, get_policy("wavepp").topology) is engine
    tep = laid_out(engine, TensorExpert())
    assert (tep.pp, tep.gpus_per_stage, tep.cost_model_name) == (1, 8, "table")
    assert laid_out(engine, TEP_NCCL).replay_args["comm"] == "nccl"
    cfg = BenchConfig(parse_workload("suffix4k"), [4], [], 8, 0, prompt_tokens=8192)
    for spec in ("trtllm-tep", "vllm-tep", "sglang-tep"):
        rec = run_one(engine, cfg, spec, 4)
        assert rec.figures.completed == 8 and rec.figures.failed == 0 and len(rec.parts.handles) == 1, spec


def test_a_tep_policy_on_the_torch_engine_is_one_line_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    from wavepp.runtime.cli import main
    assert main(["bench", "--engine", "torch", "--policy", "wavepp,vllm-tep", "--requests", "2", "--quiet"]) == 2
    assert capsys.readouterr().err.strip() == "wavepp: error: topology 'tep-nccl' runs on the sim engine only"
