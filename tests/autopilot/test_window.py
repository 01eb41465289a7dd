"""A window's workload statistics and the shift test: a move counts only past its threshold *and* its
sample's error, so a sparse window of a steady workload is not read as a new workload, while a change of
phase still is, in windows as sparse."""

from __future__ import annotations

import random
from typing import Any

import pytest

from wavepp.runtime.autopilot import window as W
from wavepp.runtime.autopilot.window import WorkloadStats, measure
from wavepp.telemetry import names as N

SECOND = 10**9


def requests(rng: random.Random, index: int, rate: float, seconds: float, prompt: int,
             reuse: float = 0.0) -> list[dict[str, Any]]:
    """An open loop's requests in window ``index``: Poisson arrivals at ``rate``, prompts uniform in
    0.75-1.25 x ``prompt``, each with ``reuse`` of it reusable, each ending within the window."""
    t0 = int(index * seconds * SECOND)
    out, t = [], rng.expovariate(rate)
    while t < seconds * 0.9:
        tokens = int(prompt * rng.uniform(0.75, 1.25))
        start = t0 + int(t * SECOND)
        out.append({"n": N.REQUEST, "t0": start, "t1": start + SECOND // 20,
                    "a": {N.GEN_AI_INPUT_TOKENS: tokens, N.REUSABLE_TOKENS: int(tokens * reuse)}})
        t += rng.expovariate(rate)
    return out


def stats(spans: list[dict[str, Any]], index: int, seconds: float) -> WorkloadStats:
    return measure(spans, index, int(index * seconds * SECOND), int((index + 1) * seconds * SECOND), 4).stats


def steady_shifts(windows: int) -> int:
    """Shifts read between consecutive windows of one steady workload: 15 arrivals a 10 s window, the torch
    benchmark's cold phase (1,536-token prompts, nothing reusable)."""
    rng = random.Random(7)
    seen = [stats(requests(rng, i, 1.5, 10.0, 1536), i, 10.0) for i in range(windows)]
    return sum(b.shift_from(a) is not None for a, b in zip(seen, seen[1:], strict=False))


def test_sparse_windows_of_a_steady_workload_are_not_read_as_shifts() -> None:
    assert steady_shifts(200) <= 2


def test_without_the_error_the_same_windows_read_as_shifts_often(monkeypatch: pytest.MonkeyPatch) -> None:
    """The regime the error matters in: the thresholds alone call about half the window pairs a shift."""
    monkeypatch.setattr(W, "SHIFT_Z", 0.0)
    assert steady_shifts(200) >= 60


def test_a_change_of_phase_is_a_shift_in_windows_as_sparse() -> None:
    rng = random.Random(3)
    chat = stats(requests(rng, 0, 1.5, 10.0, 1024, reuse=0.8), 0, 10.0)
    docs = stats(requests(rng, 1, 1.5, 10.0, 4096, reuse=0.8), 1, 10.0)
    cold = stats(requests(rng, 2, 1.5, 10.0, 4096, reuse=0.0), 2, 10.0)
    burst = stats(requests(rng, 3, 6.0, 10.0, 4096, reuse=0.0), 3, 10.0)
    assert chat.ended >= 8 and "prompt mean" in (docs.shift_from(chat) or "")
    assert "reuse share 0.80 -> 0.00" in (cold.shift_from(docs) or "")
    assert "arrival rate" in (burst.shift_from(cold) or "")


def test_one_request_says_nothing_of_the_spread() -> None:
    one = WorkloadStats(1, 8192.0, 0.0, 0.1, prompt_se=float("inf"), reuse_se=float("inf"), seconds=10.0)
    many = WorkloadStats(40, 1024.0, 0.9, 4.0, prompt_se=20.0, reuse_se=0.01, seconds=10.0)
    assert one.shift_from(many, rate=False) is None
    assert one.as_dict()["prompt_se"] is None          # JSON-safe: no infinity in a span attribute
    lone = [{"n": N.REQUEST, "t0": 0, "t1": SECOND, "a": {N.GEN_AI_INPUT_TOKENS: 8192}}]
    assert stats(lone, 0, 10.0).prompt_se == float("inf")


def test_standard_errors_of_a_window_match_their_definitions() -> None:
    spans = [{"n": N.REQUEST, "t0": i, "t1": SECOND // 2, "a": {N.GEN_AI_INPUT_TOKENS: p, N.REUSABLE_TOKENS: r}}
             for i, (p, r) in enumerate([(1000, 500), (3000, 0), (2000, 1000), (2000, 1500)])]
    s = stats(spans, 0, 1.0)
    assert s.mean_prompt_tokens == 2000 and s.reuse_share == pytest.approx(3000 / 8000)
    assert s.prompt_se == pytest.approx((2_000_000 / 3 / 4) ** 0.5)           # sample sd / sqrt(n)
    residuals = [500 - 0.375 * 1000, 0 - 0.375 * 3000, 1000 - 0.375 * 2000, 1500 - 0.375 * 2000]
    assert s.reuse_se == pytest.approx((sum(x * x for x in residuals) / 3 / 4) ** 0.5 / 2000)
    assert s.rate_se == pytest.approx(4 ** 0.5 / 1.0)                          # Poisson: sqrt(count) / seconds
