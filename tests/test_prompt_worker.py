"""A file trace's prompts made ahead by a helper process: the same tokens and hashes as made in process, the
same run, and a helper that cannot serve (not started, killed, answering for other rows) leaves the replay
making the rest itself, with one warning."""

from __future__ import annotations

import gc
import json
import logging
import os
import random
import signal
import sys
from pathlib import Path

import pytest

from wavepp.runtime.bench.runs import BenchConfig, run_one
from wavepp.runtime.engines.config import SimConfig
from wavepp.runtime.engines.sim.engine import SimEngine
from wavepp.runtime.sources import prompt_worker
from wavepp.runtime.sources.prompt_worker import AHEAD, PromptWorker
from wavepp.runtime.sources.trace_file import load_trace
from wavepp.runtime.sources.trace_prompts import TracePrompts
from wavepp.runtime.sources.traces import TraceWorkload
from wavepp.runtime.sources.workloads import make_workload, parse_workload


def _trace(path: Path, rows: int, seed: int = 0, ids: int = 40) -> Path:
    """``rows`` rows a second apart over ``ids`` distinct hash ids (shared prefixes), some lengths not a
    whole number of blocks."""
    rng = random.Random(seed)
    lines = []
    for k in range(rows):
        n = rng.randint(1, 6) * 512 - rng.choice((0, 0, 100))
        row_ids = [rng.randrange(ids) for _ in range(-(-n // 512))]
        lines.append(json.dumps({"timestamp": 1000 * k, "input_length": n, "hash_ids": row_ids}))
    path.write_text("\n".join(lines) + "\n")
    return path


def _prompts(w: TraceWorkload) -> list[tuple[bytes, list[int]]]:
    return [(r.tokens.tobytes(), r.block_hashes) for r in (w.next_request(0.0) for _ in range(w.num_requests))]


@pytest.mark.parametrize("block_size, extra", [(64, b""), (512, b"model-rev")])
def test_the_helper_makes_the_prompts_this_process_makes(tmp_path: Path, block_size: int, extra: bytes) -> None:
    path = str(_trace(tmp_path / "t.jsonl", 3 * AHEAD + 5))
    ahead = TraceWorkload(load_trace(path), block_size, 32000, extra, prefetch=True)
    assert ahead.worker is not None and ahead.worker.serving
    made_ahead = _prompts(ahead)
    assert ahead.worker.failure == "" and not ahead.worker.serving       # done: the helper was ended
    assert ahead.prompts._block.cache_info().currsize == 0                # nothing was made here
    assert made_ahead == _prompts(TraceWorkload(load_trace(path), block_size, 32000, extra))


def test_a_benchs_file_trace_is_prefetched_and_its_run_is_the_same(tmp_path: Path) -> None:
    """A virtual-time run's file trace (and a load generator's) is prefetched; the run's figures are those
    of a run that made its prompts itself. A real-time run makes its own (its clock is the wall clock)."""
    path = _trace(tmp_path / "t.jsonl", 40, ids=12)
    spec = parse_workload(f"trace:{path}")
    engine = SimEngine(SimConfig("llama-3-8b", "h200", 2, kv_blocks=[3000]))
    realtime = SimEngine(SimConfig("llama-3-8b", "h200", 2, kv_blocks=[3000], clock="wall"))
    assert engine.virtual and not realtime.virtual
    cfg = BenchConfig(spec, [8], ["wavepp"], None)
    ahead = make_workload(spec, None, 0, 64, engine.vocab_size, 0, prefetch=engine.virtual)
    assert isinstance(ahead, TraceWorkload) and ahead.worker is not None
    itself = make_workload(spec, None, 0, 64, engine.vocab_size, 0, prefetch=realtime.virtual)
    assert isinstance(itself, TraceWorkload) and itself.worker is None
    here = TraceWorkload(load_trace(str(path)), 64, engine.vocab_size)
    figures = [run_one(engine, cfg, "wavepp", 8, workload=w).figures for w in (ahead, here)]
    assert ahead.worker.failure == ""
    assert figures[0] == figures[1] and figures[0].completed == 40


def test_a_helper_killed_mid_replay_leaves_the_replay_making_the_rest(tmp_path: Path,
                                                                      caplog: pytest.LogCaptureFixture) -> None:
    path = str(_trace(tmp_path / "t.jsonl", 4 * AHEAD))
    w = TraceWorkload(load_trace(path), 64, 32000, prefetch=True)
    assert w.worker is not None
    first = [w.next_request(0.0) for _ in range(AHEAD)]
    os.kill(w.worker.pid, signal.SIGKILL)
    with caplog.at_level(logging.WARNING, logger=prompt_worker.__name__):
        rest = [w.next_request(0.0) for _ in range(w.num_requests - AHEAD)]
    assert not w.worker.serving and w.worker.failure
    warned = [r.getMessage() for r in caplog.records]
    assert len(warned) == 1 and "the replay makes them itself from here" in warned[0]
    here = _prompts(TraceWorkload(load_trace(path), 64, 32000))
    assert [(r.tokens.tobytes(), r.block_hashes) for r in first + rest] == here


def test_a_helper_answering_for_other_rows_is_dropped(tmp_path: Path) -> None:
    """An answer is checked against the replay's own row (index, hash ids, length): a helper reading another
    file (the trace replaced under it) is dropped at its first answer, and nothing of it is used."""
    mine = load_trace(str(_trace(tmp_path / "mine.jsonl", 10, seed=1)))
    other = str(_trace(tmp_path / "other.jsonl", 10, seed=2))
    worker = PromptWorker(other, len(mine.rows), TracePrompts(512, 64, 32000))
    row = mine.rows[0]
    assert worker.prompt(0, row.hash_ids, row.input_length) is None
    assert not worker.serving and worker.failure.startswith("row 0 is not the replay's (other hash ids")


def test_a_helper_that_cannot_start_leaves_the_replay_to_itself(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    path = str(_trace(tmp_path / "t.jsonl", 6))
    monkeypatch.setattr(sys, "executable", str(tmp_path / "no-python"))
    w = TraceWorkload(load_trace(path), 64, 32000, prefetch=True)
    assert w.worker is not None and not w.worker.serving and w.worker.failure.startswith("could not start")
    monkeypatch.undo()
    assert _prompts(w) == _prompts(TraceWorkload(load_trace(path), 64, 32000))


def test_a_helper_left_behind_exits_when_the_replay_lets_go(tmp_path: Path) -> None:
    """A replay that stops early (a cancelled run) leaves no helper running once the workload is gone."""
    path = str(_trace(tmp_path / "t.jsonl", 4 * AHEAD))
    w = TraceWorkload(load_trace(path), 64, 32000, prefetch=True)
    w.next_request(0.0)
    assert w.worker is not None
    pid = w.worker.pid
    del w
    gc.collect()
    with pytest.raises(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)                    # reaped already: no longer our child


def test_a_helper_that_stops_answering_is_dropped_after_its_wait(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                 caplog: pytest.LogCaptureFixture) -> None:
    """A helper stuck (or stopped) never stops the replay: past ANSWER_WAIT_S it is dropped, killed, and the
    replay makes the prompt itself."""
    path = str(_trace(tmp_path / "t.jsonl", 3))
    monkeypatch.setattr(prompt_worker, "ANSWER_WAIT_S", 0.3)
    monkeypatch.setattr(prompt_worker, "STOP_WAIT_S", 0.1)
    monkeypatch.setattr(prompt_worker, "helper_command",
                        lambda *_: [sys.executable, "-c", "import time; time.sleep(60)"])
    w = TraceWorkload(load_trace(path), 64, 32000, prefetch=True)
    assert w.worker is not None and w.worker.serving
    with caplog.at_level(logging.WARNING, logger=prompt_worker.__name__):
        made = _prompts(w)
    assert w.worker.failure == "no answer in 0.3 s" and len(caplog.records) == 1
    with pytest.raises(ChildProcessError):
        os.waitpid(w.worker.pid, os.WNOHANG)            # killed and reaped
    assert made == _prompts(TraceWorkload(load_trace(path), 64, 32000))


def test_an_answer_whose_counts_do_not_fit_its_row_is_not_used(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A header naming the right row and length with a wrong number of hashes is refused before its
    body is read as that row's."""
    path = str(_trace(tmp_path / "t.jsonl", 3))
    row = load_trace(path).rows[0]
    header = prompt_worker._HEADER.pack(0, prompt_worker.ids_crc(row.hash_ids), row.input_length,
                                        row.input_length // 64 + 1)
    liar = f"import sys; sys.stdin.buffer.read(1); sys.stdout.buffer.write({header!r}); sys.stdout.flush()"
    monkeypatch.setattr(prompt_worker, "helper_command", lambda *_: [sys.executable, "-c", liar])
    worker = PromptWorker(path, 3, TracePrompts(512, 64, 32000))
    assert worker.prompt(0, row.hash_ids, row.input_length) is None
    assert worker.failure == f"row 0: {row.input_length // 64 + 1} hashes for {row.input_length} tokens"


def _reaped(pid: int) -> bool:
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return True                                     # no longer our child: reaped
    return False


def test_a_helper_started_ahead_is_taken_by_its_traces_replay(tmp_path: Path) -> None:
    """prestart: the helper starts before the replay is set up and the replay takes it - the same prompts;
    a helper started for another trace is not taken, and one nobody took is stopped (at exit)."""
    path, other = str(_trace(tmp_path / "t.jsonl", 2 * AHEAD + 3)), str(_trace(tmp_path / "o.jsonl", 4, seed=3))
    prompt_worker.prestart(path)
    prompt_worker.prestart(path)                        # one waits at most
    prompt_worker.prestart(other)
    spares = dict(prompt_worker._SPARES)
    assert len(spares) == 2
    w = TraceWorkload(load_trace(path), 64, 32000, prefetch=True)
    assert w.worker is not None and w.worker.pid == spares[os.path.realpath(path)].pid
    assert _prompts(w) == _prompts(TraceWorkload(load_trace(path), 64, 32000)) and w.worker.failure == ""
    assert list(prompt_worker._SPARES) == [os.path.realpath(other)]
    prompt_worker.stop_spares()
    assert prompt_worker._SPARES == {} and _reaped(spares[os.path.realpath(other)].pid)


def test_a_helper_started_ahead_that_died_is_replaced(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = str(_trace(tmp_path / "t.jsonl", 6))
    prompt_worker.prestart(path)
    spare = prompt_worker._SPARES[os.path.realpath(path)]
    spare.kill()
    spare.wait()
    with caplog.at_level(logging.WARNING, logger=prompt_worker.__name__):
        w = TraceWorkload(load_trace(path), 64, 32000, prefetch=True)
        made = _prompts(w)
    assert w.worker is not None and w.worker.pid != spare.pid and w.worker.failure == "" and not caplog.records
    assert made == _prompts(TraceWorkload(load_trace(path), 64, 32000))


def test_a_benchs_first_replay_takes_the_helper_it_started_first(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """``wavepp bench`` on a file trace starts the helper before it loads the engine; its run takes it (one
    helper started for one run) and none is left waiting."""
    from wavepp.runtime.cli import main
    path = _trace(tmp_path / "t.jsonl", 12)
    started: list[str] = []
    waiting: list[bool] = []                          # whether a helper started ahead waited for the replay
    start, take = prompt_worker._start, prompt_worker._taken_or_started
    monkeypatch.setattr(prompt_worker, "_start", lambda p: started.append(p) or start(p))
    monkeypatch.setattr(prompt_worker, "_taken_or_started",
                        lambda p: waiting.append(os.path.realpath(p) in prompt_worker._SPARES) or take(p))
    rc = main(["bench", "--engine", "sim", "--model", "llama-3-8b", "--hardware", "h200", "--pp", "2",
               "--workload", f"trace:{path}", "--policy", "wavepp", "--quiet", "--kv-blocks", "3000"])
    assert rc == 0 and waiting == [True] and started == [str(path)] and prompt_worker._SPARES == {}
