"""Trace replay: Mooncake-format lines -> requests with shared prefix blocks, arriving open-loop
at the trace's timestamps; malformed lines reported with their line numbers."""

from __future__ import annotations

from pathlib import Path

import pytest

from wavepp.runtime.bench.runs import BenchConfig, run_one
from wavepp.runtime.cli import main
from wavepp.runtime.engines.config import SimConfig
from wavepp.runtime.engines.sim.engine import SimEngine
from wavepp.runtime.sources.trace_file import TraceError, load_trace
from wavepp.runtime.sources.traces import TraceWorkload
from wavepp.runtime.sources.workloads import parse_workload
from wavepp.telemetry import names as N

DATA = Path(__file__).parent / "data" / "traces"
GOOD, BAD = str(DATA / "good.jsonl"), str(DATA / "bad.jsonl")


def test_equal_hash_ids_give_equal_tokens_and_block_hashes() -> None:
    w = TraceWorkload(load_trace(GOOD), 64, 32000)
    a, b, c, d = (w.next_request(0.0) for _ in range(4))
    assert [r.num_tokens for r in (a, b, c, d)] == [1100, 1300, 700, 1536]
    assert a.block_hashes[:16] == b.block_hashes[:16]          # ids 0, 1: 1024 tokens = 16 blocks of 64
    assert a.block_hashes[16] != b.block_hashes[16]            # id 2 vs 3
    assert d.block_hashes[:17] == a.block_hashes[:17]          # same ids, a longer last block
    assert not set(c.block_hashes) & set(a.block_hashes)
    assert [w.arrival_offset(i) for i in range(4)] == [0.0, 0.5, 1.0, 1.5]


def test_remembered_prefix_hashes_are_the_prompts_own() -> None:
    """A shared prefix is hashed once (remembered per parent and hash id); every request's hashes are
    still exactly those of its tokens, for any block size dividing the trace's blocks."""
    from wavepp.runtime.kvcache.hashing import block_hashes
    for block in (64, 128, 512):
        w = TraceWorkload(load_trace(GOOD), block, 32000, extra=b"m")
        for _ in range(w.num_requests):
            r = w.next_request(0.0)
            assert r.block_hashes == block_hashes(r.tokens, block, b"m")
        assert w.prompts._hashed.cache_info().currsize           # the prefixes were remembered, not rehashed


def test_a_memo_of_one_block_gives_the_same_requests_as_an_unbounded_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """The blocks a replay remembers are bounded; a block forgotten is made again, the same."""
    from wavepp.runtime.sources import trace_prompts

    def requests(memo: int) -> list[tuple[list[int], list[int]]]:
        monkeypatch.setattr(trace_prompts, "TRACE_BLOCK_MEMO", memo)
        w = TraceWorkload(load_trace(GOOD), 64, 32000)
        out = [w.next_request(0.0) for _ in range(w.num_requests)]
        assert w.prompts._block.cache_info().currsize <= memo and w.prompts._hashed.cache_info().currsize <= memo
        return [(list(r.tokens), r.block_hashes) for r in out]

    assert requests(1) == requests(1 << 20)


def test_a_closed_loop_trace_workload_arrives_as_requests_finish() -> None:
    """open_loop=False (a what-if replay of a closed-loop run): the offsets are ignored; the first c
    arrive at once, each later one when an earlier one finishes."""
    trace = load_trace(GOOD)
    engine = SimEngine(SimConfig("llama-3-8b", "h200", 2, kv_blocks=[3000]))
    cfg = BenchConfig(parse_workload("trace:" + GOOD), [2], ["wavepp"], None)
    record = run_one(engine, cfg, "wavepp", 2, workload=TraceWorkload(trace, 64, 32000, open_loop=False))
    reqs = sorted((s for s in record.encoded if s["n"] == N.REQUEST), key=lambda s: s["t0"])
    ends = sorted(s["t1"] for s in reqs)
    assert len(reqs) == len(trace.rows) and reqs[0]["t0"] == reqs[1]["t0"]
    for k, later in enumerate(reqs[2:]):
        assert later["t0"] >= ends[k]                             # never more than 2 outstanding
    assert reqs[-1]["t0"] < trace.rows[-1].arrival_s * 1e9 + reqs[0]["t0"]   # not at the trace's offsets


def test_a_bad_line_fails_with_its_number_or_is_skipped_and_counted() -> None:
    with pytest.raises(TraceError, match=r"bad.jsonl:2: .*\(--on-bad-line skip to replay the rest\)"):
        load_trace(BAD)
    trace = load_trace(BAD, "skip")
    assert [r.line for r in trace.rows] == [1, 5]
    assert trace.skipped == 4 and trace.first_skip.endswith(":2: Expecting property name enclosed in double "
                                                            "quotes: line 1 column 2 (char 1)")
    for bad, why in [(3, "timestamp must be"), (4, "1 hash_ids for 1100 tokens"), (6, "not a JSON object")]:
        lines = open(BAD).read().splitlines()
        only = DATA.parent / f"one{bad}.jsonl"
        only.write_text(lines[bad - 1] + "\n")
        try:
            with pytest.raises(TraceError, match=f"one{bad}.jsonl:1: {why}"):
                load_trace(str(only))
        finally:
            only.unlink()


def test_requests_arrive_open_loop_at_the_trace_offsets() -> None:
    engine = SimEngine(SimConfig("llama-3-8b", "h200", 2, block_size=64, kv_blocks=[400]))
    spec = parse_workload(f"trace:{GOOD}")
    rec = run_one(engine, BenchConfig(spec, [8], ["wavepp"], None, 0), "wavepp", 8)
    assert rec.figures.completed == 4 and rec.figures.workload == f"trace:{GOOD}"
    starts = sorted(s["t0"] for s in rec.encoded if s["n"] == N.REQUEST)
    offsets = [(t - starts[0]) / 1e9 for t in starts]
    assert offsets == pytest.approx([0.0, 0.5, 1.0, 1.5], abs=1e-6)
    assert rec.figures.good_hit_rate is not None and rec.figures.good_hit_rate > 0   # shared ids were reused


def test_concurrency_caps_outstanding_requests_of_a_trace() -> None:
    """At most one outstanding: the second request arrives when the first finishes, not at 0.5 s
    (replayed 1000x faster, every offset is under a millisecond)."""
    import dataclasses
    engine = SimEngine(SimConfig("llama-3-8b", "h200", 2, block_size=64, kv_blocks=[400]))
    spec = dataclasses.replace(parse_workload(f"trace:{GOOD}"), speed=1000.0)
    rec = run_one(engine, BenchConfig(spec, [1], ["wavepp"], None, 0), "wavepp", 1)
    reqs = sorted((s for s in rec.encoded if s["n"] == N.REQUEST), key=lambda s: s["t0"])
    for before, after in zip(reqs, reqs[1:], strict=False):
        assert after["t0"] >= before["t1"]


def test_bench_on_a_bad_trace_is_one_line_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "--model", "llama-3-8b", "--hardware", "h200", "--pp", "2", "--quiet",
                 "--workload", f"trace:{BAD}"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("wavepp: error:") and "bad.jsonl:2:" in err[0], err
    assert main(["bench", "--model", "llama-3-8b", "--hardware", "h200", "--pp", "2", "--quiet",
                 "--workload", f"trace:{BAD}", "--on-bad-line", "skip", "--concurrency", "2",
                 "--kv-blocks", "400"]) == 0
    err = capsys.readouterr().err
    assert "skipped 4 malformed line(s) of the trace, first: " in err and "bad.jsonl:2:" in err
    assert main(["bench", "--quiet", "--workload", "trace:/nonexistent/t.jsonl"]) == 2
    assert "cannot read trace '/nonexistent/t.jsonl'" in capsys.readouterr().err


def test_a_trace_counts_the_arrivals_its_concurrency_cap_held_back() -> None:
    """Replayed 1000x faster, every request is due before the first ends: a cap of one holds back all but
    the first, no cap none (the autopilot reads an open loop's arrival rate only where nothing was held)."""
    import dataclasses
    engine = SimEngine(SimConfig("llama-3-8b", "h200", 2, block_size=64, kv_blocks=[400]))
    spec = dataclasses.replace(parse_workload(f"trace:{GOOD}"), speed=1000.0)
    held = {}
    for cap in (1, 0):
        source = TraceWorkload(load_trace(GOOD), 64, 32000, speed=1000.0)
        run_one(engine, BenchConfig(spec, [cap], ["wavepp"], None, 0), "wavepp", cap, workload=source)
        held[cap] = source.held_by_cap
    assert held == {1: source.num_requests - 1, 0: 0}


def test_a_hash_id_beyond_64_bits_is_a_bad_line(tmp_path: Path) -> None:
    path = tmp_path / "big.jsonl"
    path.write_text('{"timestamp": 0, "input_length": 600, "hash_ids": [1, 9223372036854775808]}\n'
                    '{"timestamp": 1, "input_length": 600, "hash_ids": [1, 9223372036854775807]}\n')
    with pytest.raises(TraceError, match=r"big.jsonl:1: hash_ids must be a list of integers in \[0, 2\^63\)"):
        load_trace(str(path))
    assert list(load_trace(str(path), "skip").rows[0].hash_ids) == [1, 2**63 - 1]
