"""Reading the kernel tables: the rows pyarrow's own filtered read gives, without pandas on the way."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from wavepp.runtime.engines.sim.perf_tables import read_matching

PERF = Path(__file__).resolve().parents[3].parent / "shared" / "data" / "perf"
needs_tables = pytest.mark.skipif(not (PERF / "b300_sxm").is_dir(), reason="../shared/data/perf is not present")


def _filtered(path: Path, where: dict[str, Any], columns: list[str]) -> dict[str, list[Any]]:
    """What ``pq.read_table``'s own filters give (through pyarrow.dataset)."""
    data = pq.read_table(path, columns=columns, filters=[(k, "=", v) for k, v in where.items()] or None)
    return {c: data.column(c).to_pylist() for c in columns}


def test_matches_pyarrows_filters_over_row_groups_nulls_and_strings(tmp_path: Path) -> None:
    n = 1000
    table = pa.table({
        "dtype": pa.array([None if i % 97 == 0 else ("fp8" if i % 3 else "bf16") for i in range(n)]),
        "tp": pa.array([None if i % 89 == 0 else i % 4 for i in range(n)], pa.int64()),
        "m": pa.array(range(n), pa.int64()),
        "latency": pa.array([i / 7 for i in range(n)], pa.float64()),
        "source": pa.array(["graph" if i % 5 else "eager" for i in range(n)]),
    })
    path = tmp_path / "t.parquet"
    pq.write_table(table, path, row_group_size=128)       # several row groups: several chunks once read
    cases: list[dict[str, Any]] = [
        {"dtype": "fp8"}, {"dtype": "bf16", "tp": 2}, {"tp": 0, "dtype": "fp8", "source": "eager"},
        {"dtype": "fp16"}, {"tp": 9}, {},
    ]
    for where in cases:
        got = read_matching(path, where, ["m", "latency", "source"])
        assert got == _filtered(path, where, ["m", "latency", "source"]), where
    assert read_matching(path, {"dtype": "fp16"}, ["m"]) == {"m": []}
    assert len(read_matching(path, {"dtype": "fp8"}, ["m"])["m"]) == len([
        i for i in range(n) if i % 97 and i % 3])                     # nulls match nothing


@needs_tables
def test_matches_pyarrows_filters_on_the_shared_tables() -> None:
    rc20 = PERF / "b300_sxm" / "trtllm" / "1.3.0rc20"
    for table, where, columns in [
        ("gemm_perf", {"gemm_dtype": "bfloat16"}, ["m", "n", "k", "latency"]),
        ("moe_perf", {"moe_dtype": "fp8_block", "topk": 8, "moe_tp_size": 1}, ["num_tokens", "latency"]),
        ("custom_allreduce_perf", {"allreduce_dtype": "bfloat16", "num_gpus": 8},
         ["message_size", "latency", "kernel_source"]),
    ]:
        got = read_matching(rc20 / f"{table}.parquet", where, columns)
        assert got[columns[0]], table
        assert got == _filtered(rc20 / f"{table}.parquet", where, columns), table


@needs_tables
def test_a_sim_bench_on_the_memory_store_imports_neither_pandas_nor_redis() -> None:
    """Each costs a sim bench's start-up a tenth of a second or more; neither is used by such a run."""
    code = (
        "import sys\n"
        "from wavepp.runtime.cli import main\n"
        "rc = main(['bench', '--engine', 'sim', '--cost-model', 'table', '--model', 'glm-5.2', '--requests', '2',"
        " '--concurrency', '2', '--prompt-tokens', '1024', '--policy', 'wavepp', '--quiet'])\n"
        "assert rc == 0, rc\n"
        "print(sorted(m for m in ('pandas', 'redis', 'pyarrow.dataset') if m in sys.modules))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "WAVEPP_PERF_DIR": str(PERF)})
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip().splitlines()[-1] == "[]"
