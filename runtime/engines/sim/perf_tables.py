"""Where the measured TensorRT-LLM kernel tables live and how one table is read (FORMAT.md §1).

The tables are aiconfigurator's copied Parquet files under ``<perf>/<system>/trtllm/<version>/``; see
../shared/data/perf/FORMAT.md. The perf folder is ``--perf-dir``, else ``$WAVEPP_PERF_DIR``, else
``../shared/data/perf`` beside the repository (how CI lays out a clone with its shared data).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from wavepp.runtime.engines.sim.perf_interp import TableCoverageError

PERF_DIR_ENV = "WAVEPP_PERF_DIR"
# Our hardware profile names -> aiconfigurator's system folders (FORMAT §1 "Local layout").
SYSTEMS = {"h200": "h200_sxm", "b300": "b300_sxm"}
# The NCCL version each system's YAML names (misc.nccl_version; FORMAT §1).
NCCL_VERSIONS = {"h200_sxm": "2.26.2", "b300_sxm": "2.27"}


def default_perf_dir() -> Path:
    """``$WAVEPP_PERF_DIR`` when set, else ``<repo>/../shared/data/perf``."""
    env = os.environ.get(PERF_DIR_ENV)
    if env:
        return Path(env)
    # runtime/engines/sim/<this file> -> parents[3] is the repository root.
    return Path(__file__).resolve().parents[3].parent / "shared" / "data" / "perf"


def read_matching(path: Path, where: dict[str, Any], columns: list[str]) -> dict[str, list[Any]]:
    """Columns of the rows of the Parquet file at ``path`` whose ``where`` columns equal the given values, in
    file order (a null matches nothing).

    Read whole (the largest table is ~130K rows) and matched here rather than through ``read_table``'s
    ``filters``, and as Python lists rather than numpy arrays: the filters go through ``pyarrow.dataset`` and
    an array's ``to_numpy`` through pyarrow's pandas shim, each importing pandas (~0.25 s, a quarter of a sim
    bench's start-up). A string column to match on is read dictionary-encoded and matched on its codes.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq  # lazy: only the table cost model needs pyarrow

    schema = pq.read_schema(path)
    strings = [n for n in where if pa.types.is_string(schema.field(n).type)
               or pa.types.is_large_string(schema.field(n).type)]
    table = pq.ParquetFile(path, read_dictionary=strings).read(columns=list(dict.fromkeys([*columns, *where])))
    rows: range | list[int] = range(table.num_rows)
    for name, value in where.items():           # each column checked only at the rows still matching
        rows = _matching_rows(table.column(name), value, rows)
    out: dict[str, list[Any]] = {}
    for name in columns:
        values = table.column(name).to_pylist()
        out[name] = values if isinstance(rows, range) else [values[i] for i in rows]
    return out


def _matching_rows(column: Any, value: Any, rows: range | list[int]) -> list[int]:
    """Those of ``rows`` at which ``column`` (an Arrow chunked array) equals ``value``; a null equals nothing."""
    import pyarrow as pa

    matched: list[int] = []
    start = 0
    for chunk in column.chunks:
        end = start + len(chunk)
        here = [i for i in rows if start <= i < end] if column.num_chunks > 1 else rows
        if pa.types.is_dictionary(chunk.type):   # compare codes: decoding ~100K strings costs ~0.15 s
            wanted = {code for code, v in enumerate(chunk.dictionary.to_pylist()) if v == value}
            codes = chunk.indices.to_pylist()
            matched += [i for i in here if codes[i - start] in wanted]
        else:
            values = chunk.to_pylist()
            matched += [i for i in here if values[i - start] == value]
        start = end
    return matched


def _version_key(name: str) -> tuple[int, ...]:
    """``1.3.0rc23`` -> (1, 3, 0, 23): the numeric parts, so rc23 sorts above rc20."""
    return tuple(int(p) for p in re.findall(r"\d+", name))


class PerfTables:
    """One system's TensorRT-LLM tables, every version, newest first.

    FORMAT §1: aiconfigurator uses the highest version and fills what it lacks from older ones, the
    first source that has the shape winning; :meth:`read` does the same per queried shape.
    """

    def __init__(self, perf_dir: str | Path | None, hardware: str) -> None:
        root = Path(perf_dir) if perf_dir is not None else default_perf_dir()
        if hardware not in SYSTEMS:
            raise TableCoverageError(f"no kernel tables for hardware {hardware!r} (tables: {', '.join(SYSTEMS)})")
        self.system = SYSTEMS[hardware]
        base = root / self.system / "trtllm"
        if not base.is_dir():
            raise TableCoverageError(
                f"no kernel tables at {base} (give --perf-dir or set {PERF_DIR_ENV} to ../shared/data/perf)")
        self.versions = sorted((d for d in base.iterdir() if d.is_dir()), key=lambda d: _version_key(d.name),
                               reverse=True)
        self.root = root

    def read_nccl(self, where: dict[str, Any], columns: list[str]) -> dict[str, list[Any]]:
        """Columns of the system's ``nccl_perf`` rows matching ``where``, from the NCCL version its YAML names
        (``misc.nccl_version``: FORMAT §1), each key's first row (FORMAT §4: some files hold keys twice)."""
        path = self.root / self.system / "nccl" / NCCL_VERSIONS[self.system] / "nccl_perf.parquet"
        if not path.is_file():
            raise TableCoverageError(f"no NCCL table at {path}")
        data = read_matching(path, where, [*columns, "message_size"] if "message_size" not in columns else columns)
        seen: set[Any] = set()
        out: dict[str, list[Any]] = {c: [] for c in columns}
        for i, size in enumerate(data["message_size"]):
            if size in seen:
                continue
            seen.add(size)
            for c in columns:
                out[c].append(data[c][i])
        if not out[columns[0]]:
            shape = ", ".join(f"{k}={v}" for k, v in where.items())
            raise TableCoverageError(f"nccl_perf on {self.system} has no rows for {shape}")
        return out

    def read(self, table: str, where: dict[str, Any], columns: list[str]) -> dict[str, list[Any]]:
        """Columns of the rows of ``table`` matching ``where``, from the newest version that has any."""
        found_file = False
        for version in self.versions:
            path = version / f"{table}.parquet"
            if not path.is_file():
                continue
            found_file = True
            data = read_matching(path, where, columns)
            if data[columns[0]]:
                return data
        if not found_file:
            raise TableCoverageError(f"{table}.parquet is missing from {self.root / self.system / 'trtllm'}")
        shape = ", ".join(f"{k}={v}" for k, v in where.items())
        raise TableCoverageError(f"{table} on {self.system} has no rows for {shape}")
