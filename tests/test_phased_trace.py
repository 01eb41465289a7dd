"""The phased trace: a valid Mooncake-format file whose phases have the shapes they name, and each phase's
figures read back from a replay's request spans."""

from __future__ import annotations

from pathlib import Path

import pytest

from wavepp.runtime.sources.phased_trace import Phase, phase_figures, write
from wavepp.runtime.sources.trace_file import load_trace
from wavepp.telemetry import names as N

PHASES = (Phase("chat", "groups", 40, 50.0, 4096, shared=2), Phase("docs", "docs", 20, 5.0, 65536, shared=3),
          Phase("cold", "cold", 10, 1.0, 8192))


def test_each_phase_has_its_shape_and_arrives_at_its_rate(tmp_path: Path) -> None:
    path = tmp_path / "phased.jsonl"
    bounds = write(path, PHASES, seed=3)
    assert bounds == [("chat", 1, 40), ("docs", 41, 60), ("cold", 61, 70)]
    rows = load_trace(str(path)).rows                       # the trace loader's own checks pass
    chat, docs, cold = rows[:40], rows[40:60], rows[60:]
    assert len({tuple(r.hash_ids[:7]) for r in chat}) == 2   # 7 of 8 blocks: one of two system prompts
    assert len({tuple(r.hash_ids[:-4]) for r in docs}) <= 3   # a document, then a 2048-token question
    assert all(r.input_length - 4 * 512 >= 65536 // 2 for r in docs)
    seen = {h for r in rows[:60] for h in r.hash_ids}
    assert not seen & {h for r in cold for h in r.hash_ids}   # cold: nothing shared with anything
    assert len({h for r in cold for h in r.hash_ids}) == sum(len(r.hash_ids) for r in cold)
    assert [r.arrival_s for r in rows] == sorted(r.arrival_s for r in rows)
    span = chat[-1].arrival_s - chat[0].arrival_s
    assert 0.5 < 39 / span / 50.0 < 2                         # ~50 requests/s (40 Poisson gaps)


def test_a_phase_needs_its_shape_described() -> None:
    with pytest.raises(ValueError, match="kind must be one of"):
        Phase("x", "chat", 1, 1.0, 4096)
    with pytest.raises(ValueError, match="needs shared >= 1"):
        Phase("x", "docs", 1, 1.0, 4096)
    with pytest.raises(ValueError, match="a question needs at least one token, got 0"):
        Phase("x", "docs", 1, 1.0, 4096, shared=1, question=0)


def test_a_docs_phase_asks_questions_of_its_own_length(tmp_path: Path) -> None:
    phase = Phase("docs", "docs", 12, 5.0, 1024, shared=2, question=256)
    write(tmp_path / "q.jsonl", [phase], seed=1, max_context=4096)
    rows = load_trace(str(tmp_path / "q.jsonl")).rows
    assert {r.input_length % 512 for r in rows} == {256}             # whole 512-token document blocks + 256
    assert max(r.input_length for r in rows) <= phase.longest_prompt == 1536 + 256


def test_phase_figures_group_request_spans_by_trace_line() -> None:
    def req(line: int, t0: float, t1: float, tokens: int, err: bool = False) -> dict[str, object]:
        span: dict[str, object] = {"n": N.REQUEST, "t0": int(t0 * 1e9), "t1": int(t1 * 1e9),
                                   "a": {N.REQUEST_ID: f"t{line:06d}", N.GEN_AI_INPUT_TOKENS: tokens}}
        if err:
            span["err"] = "failed"
        return span
    spans = [req(1, 0, 1, 100), req(2, 0.5, 2, 300), req(3, 2, 4, 1000), req(4, 2, 3, 5, err=True),
             {"n": N.EXECUTE, "t0": 0, "t1": 1, "a": {}}]
    first, second, third = phase_figures(spans, [("a", 1, 2), ("b", 3, 4), ("c", 5, 9)])
    assert (first.completed, first.input_tokens_per_s) == (2, 200.0)
    assert (second.completed, second.input_tokens_per_s, second.prefill_p99_s) == (1, 500.0, 2.0)
    assert (third.completed, third.input_tokens_per_s) == (0, None)


def test_no_drawn_prompt_is_longer_than_its_phase_says_and_a_phase_too_long_for_the_model_is_refused(
        tmp_path: Path) -> None:
    """A phase's longest prompt bounds every prompt it draws; given the model's context, writing a phase
    that could exceed it fails naming the phase (the replay would refuse those prompts at arrival)."""
    path = tmp_path / "phased.jsonl"
    bounds = write(path, PHASES, seed=3, max_context=max(p.longest_prompt for p in PHASES))
    rows = load_trace(str(path)).rows
    for phase, (_, first, last) in zip(PHASES, bounds, strict=True):
        assert max(r.input_length for r in rows[first - 1:last]) <= phase.longest_prompt
    docs = Phase("docs", "docs", 4, 1.0, 6144, shared=4)           # up to 9,216 + 2,048 tokens
    with pytest.raises(ValueError, match=r"context of 8,192 tokens: docs \(up to 11,264 tokens\)"):
        write(tmp_path / "long.jsonl", (PHASES[0], docs), max_context=8192)
    assert not (tmp_path / "long.jsonl").exists()
