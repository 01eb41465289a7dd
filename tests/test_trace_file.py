"""A trace file checked once and its rows read again as replayed: the rows a reader that held them all gives,
in arrival order; a bounded block of them held; a file changed under the replay ends it with a clear error."""

from __future__ import annotations

import json
import os
import random
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from wavepp.runtime.bench.runs import BenchConfig, run_one
from wavepp.runtime.engines.config import SimConfig
from wavepp.runtime.engines.sim.engine import SimEngine
from wavepp.runtime.sources import traces
from wavepp.runtime.sources.trace_file import READ_AHEAD_ROWS, FileRows, TraceError, TraceRow, load_trace
from wavepp.runtime.sources.traces import DistinctIds, TraceWorkload
from wavepp.runtime.sources.workloads import parse_workload


def _write(path: Path, stamps: list[float], seed: int = 0,
           noise: bool = False) -> list[tuple[int, float, int, list[int]]]:
    """A trace of one row a stamp (ms), with blank and bad lines among them if ``noise``; the rows as
    (line, arrival s, input length, ids)."""
    rng = random.Random(seed)
    out, text = [], []
    for stamp in stamps:
        if noise and rng.random() < 0.05:
            text.append("" if rng.random() < 0.5 else "{bad")
        n = rng.randint(1, 3000)
        ids = [rng.randrange(50) for _ in range(-(-n // 512))]
        text.append(json.dumps({"timestamp": stamp, "input_length": n, "output_length": 1, "hash_ids": ids}))
        out.append((len(text), stamp / 1000.0, n, ids))
    path.write_text("\n".join(text) + "\n")
    return out


def _as_tuples(rows: list[TraceRow]) -> list[tuple[int, float, int, list[int]]]:
    return [(r.line, r.arrival_s, r.input_length, list(r.hash_ids)) for r in rows]


@settings(max_examples=25, deadline=None)
@given(st.lists(st.integers(0, 40), min_size=1, max_size=700), st.integers(0, 2**16))
def test_rows_are_the_files_in_arrival_order_ties_in_line_order(tmp_path_factory: pytest.TempPathFactory,
                                                                stamps: list[int], seed: int) -> None:
    path = tmp_path_factory.mktemp("t") / "t.jsonl"
    expected = sorted(_write(path, [float(s) for s in stamps], seed, noise=True), key=lambda r: (r[1], r[0]))
    trace = load_trace(str(path), "skip")
    rows = trace.rows
    assert isinstance(rows, FileRows) and len(rows) == len(expected)
    assert _as_tuples(list(rows)) == expected
    k = random.Random(seed).randrange(len(rows))         # any row, any order: from the index and the file
    assert _as_tuples([rows[k], rows[0], rows[-1]]) == [expected[k], expected[0], expected[-1]]
    assert _as_tuples(rows[k:k + 3]) == expected[k:k + 3]


def test_a_limit_keeps_the_first_valid_rows_of_the_file(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    written = _write(path, [float(s) for s in range(100, 0, -1)])      # the file is in reverse order
    rows = load_trace(str(path), "skip", limit=10).rows
    assert _as_tuples(list(rows)) == sorted(written[:10], key=lambda r: r[1])


def test_a_replay_holds_one_block_of_rows(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    _write(path, [float(s) for s in range(3 * READ_AHEAD_ROWS + 7)])
    rows = load_trace(str(path), "skip").rows
    assert isinstance(rows, FileRows)
    for i in range(len(rows)):
        assert rows[i].line > 0 and len(rows._block) <= READ_AHEAD_ROWS
    with pytest.raises(IndexError):
        rows[len(rows)]


def test_a_file_changed_under_the_replay_ends_it_with_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    _write(path, [float(s) for s in range(2 * READ_AHEAD_ROWS)])
    trace = load_trace(str(path))
    first = trace.rows[0]
    with path.open("a") as f:                  # appended to: the size changed
        f.write('{"timestamp": 1e6, "input_length": 1, "hash_ids": [1]}\n')
    assert trace.rows[1].line == 2             # the block already read stays readable
    with pytest.raises(TraceError, match=r"t.jsonl' changed on disk while it was replayed: replay it again"):
        trace.rows[READ_AHEAD_ROWS]

    _write(path, [float(s) for s in range(2 * READ_AHEAD_ROWS)])
    trace = load_trace(str(path))
    text = path.read_bytes()
    st = os.stat(path)
    path.write_bytes(text.replace(b'"timestamp": 300.0', b'"timestamp": 301.0'))   # same size, same mtime
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    with pytest.raises(TraceError, match=r"t.jsonl:\d+: the line changed while the trace was replayed"):
        list(trace.rows)

    _write(path, [float(s) for s in range(2 * READ_AHEAD_ROWS)])
    trace = load_trace(str(path))
    st = os.stat(path)
    other = tmp_path / "other.jsonl"           # renamed over it: the same arrivals, size and mtime, other ids
    other.write_bytes(re.sub(rb'"hash_ids": \[(\d)', lambda m: b'"hash_ids": [%d' % ((int(m[1]) + 1) % 10),
                             path.read_bytes()))
    os.utime(other, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert (os.stat(other).st_size, load_trace(str(other)).rows[0].arrival_s) == (st.st_size, first.arrival_s)
    os.replace(other, path)
    with pytest.raises(TraceError, match=r"t.jsonl' changed on disk while it was replayed: replay it again"):
        trace.rows[0]
    path.unlink()
    with pytest.raises(TraceError, match=r"cannot read trace .* again while replaying it"):
        trace.rows[0]
    assert first.line == 1


def test_a_run_whose_trace_changed_fails_with_that_error(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    _write(path, [float(s) for s in range(READ_AHEAD_ROWS + 10)])
    trace = load_trace(str(path))
    path.write_text(path.read_text() + "\n")
    engine = SimEngine(SimConfig("llama-3-8b", "h200", 2, kv_blocks=[3000]))
    cfg = BenchConfig(parse_workload(f"trace:{path}"), [8], ["wavepp"], None)
    with pytest.raises(TraceError, match="changed on disk"):
        run_one(engine, cfg, "wavepp", 8, workload=TraceWorkload(trace, 64, 32000, speed=100.0))


def test_a_line_that_is_not_utf8_is_a_bad_line_with_its_number(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_bytes(b'{"timestamp": 0, "input_length": 1, "hash_ids": [1]}\n'
                     b'{"timestamp": 1, "input_length": 1, "hash_ids": [2], "x": "\xff"}\n')
    with pytest.raises(TraceError, match=r"t.jsonl:2: 'utf-8' codec can't decode byte 0xff"):
        load_trace(str(path))
    assert [r.line for r in load_trace(str(path), "skip").rows] == [1]


def test_a_pipe_is_refused_before_it_is_read(tmp_path: Path) -> None:
    """A replay reads its file more than once (a check, then each run's rows): a pipe would be empty the
    second time, so it is refused by name, before a FIFO's open could wait for a writer."""
    fifo = tmp_path / "t.fifo"
    os.mkfifo(fifo)
    with pytest.raises(TraceError, match=r"t.fifo' is not a regular file: a replay reads it again"):
        load_trace(str(fifo))


@settings(max_examples=50, deadline=None)
@given(st.lists(st.lists(st.integers(0, 2**63 - 1) | st.integers(0, 30), max_size=20), max_size=40),
       st.integers(1, 64))
def test_distinct_ids_count_as_a_set_does(batches: list[list[int]], fold: int) -> None:
    old = traces.DISTINCT_FOLD_IDS
    traces.DISTINCT_FOLD_IDS = fold             # folds at every size, a set's answer each time
    try:
        ids, seen = DistinctIds(), set()
        for batch in batches:
            ids.add(batch)
            seen.update(batch)
            assert len(ids) == len(seen)
    finally:
        traces.DISTINCT_FOLD_IDS = old


def test_the_working_set_counts_the_issued_requests_ids() -> None:
    good = str(Path(__file__).parent / "data" / "traces" / "good.jsonl")
    w = TraceWorkload(load_trace(good), 64, 32000)
    assert w.working_set_tokens() == 0
    rows = list(w.trace.rows)
    for i in range(w.num_requests):
        w.next_request(0.0)
        assert w.working_set_tokens() == len({h for r in rows[: i + 1] for h in r.hash_ids}) * 512
