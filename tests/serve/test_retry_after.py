"""Retry-After on a full queue: the time the queue takes to drain at the rate requests were answered
lately, not the average since the server started."""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest

from runtime.engines.sim.engine import SimEngine
from runtime.knobs import Knobs
from runtime.serve.runtime import RecentRate, ServerRuntime


def test_the_rate_is_over_the_recent_window_or_since_the_start() -> None:
    rate = RecentRate(started=0.0, window_s=30.0)
    for minute in range(60):                        # one answer a minute for an hour ...
        rate.note(minute * 60.0)
    for i in range(100):                            # ... then a hundred in ten seconds
        rate.note(3590.0 + i * 0.1)
    assert rate.per_s(3600.0) == pytest.approx(100 / 30)
    assert rate.per_s(3700.0) == 0.0                # nothing answered in the last 30 s
    young = RecentRate(started=0.0)
    for i in range(10):
        young.note(i * 0.1)
    assert young.per_s(1.0) == pytest.approx(10.0)  # 10 in its first second: 10/s, not 10/30


def test_retry_after_is_the_queue_over_the_recent_rate() -> None:
    rt = ServerRuntime(SimEngine("llama-3-8b", "h200", 2, kv_blocks=[500]), Knobs(), max_queue=64)
    now = time.monotonic()
    rt.answered = RecentRate(started=now - 3600.0)  # up for an hour, idle until the last ten seconds
    for i in range(100):
        rt.answered.note(now - 10.0 + i * 0.1)
    rt.source = SimpleNamespace(queued=40)          # type: ignore[assignment]
    assert rt.retry_after_s() == round(40 / (100 / 30))                  # 12 s (the hour's average: 60 s)
    rt.source = SimpleNamespace(queued=10_000)      # type: ignore[assignment]
    assert rt.retry_after_s() == 60                                     # at most a minute
    rt.answered = RecentRate(started=now)
    assert rt.retry_after_s() == 1                  # nothing answered yet: try again soon
