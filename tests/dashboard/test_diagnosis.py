"""The Pipeline page's reading: the bottleneck stage with its own cause (never another stage's), the
stage it starves, and the knob that addresses the cause with the change a one-click Preview tries."""

from __future__ import annotations

import pandas as pd
import pytest

from wavepp.dashboard.diagnosis import BUSY, diagnose, proposal
from wavepp.runtime.control.knobs import Knobs
from wavepp.runtime.figures.idle_causes import MEANING


def shares(rows: list[tuple[int, str, float]]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=["stage", "cause", "share"])


def test_the_bottleneck_is_explained_by_its_own_cause_not_the_idlest_stage() -> None:
    """Stage 0 is busiest (idle 6.6%, mostly ring full); stage 3 idles 12% waiting for the previous
    stage. The reading explains stage 0 by the ring and names the ring knob - not stage 3's wait."""
    got = diagnose(shares([(0, "ring_full", 0.05), (0, "other", 0.016), (1, "previous_stage", 0.08),
                           (2, "previous_stage", 0.10), (3, "previous_stage", 0.118), (3, "transfer", 0.002)]),
                   2.0, MEANING, 4)
    assert (got.bottleneck, got.cause, got.knob, got.direction) == (0, "ring_full", "ring", "up")
    assert got.line.startswith("In the last 2.000 s, stage 0 is the bottleneck (busy 93.4%); its own cause: "
                               "ring full (no wave slot) (idle 6.6%: 5.0% ring full"), got.line
    assert "It starves stage 1, which waits on it 8.0% of the window (idle 8.0%: 8.0% waiting for the previous " \
           "stage)." in got.line, got.line
    assert "Knob: raise ring" in got.line
    assert "stage 3" not in got.line


@pytest.mark.parametrize(("cause", "knob", "direction"), [
    ("no_work", "max_leases", "up"), ("admission", "max_round_requests", "up"), ("fill", "max_wave_tokens", "down"),
    ("kv_capacity", "max_leases", "down"), ("previous_stage", "fill_factor", "plus")])
def test_each_cause_names_the_knob_that_addresses_it(cause: str, knob: str, direction: str) -> None:
    got = diagnose(shares([(1, cause, 0.2), (0, "ring_full", 0.4), (0, "no_work", 0.1)]), 1.0, MEANING, 2)
    assert (got.bottleneck, got.cause, got.knob, got.direction) == (1, cause, knob, direction)
    assert "It starves stage 0, which waits on it 40.0% of the window (idle 50.0%" in got.line  # its wave slots


def test_a_bottleneck_that_hardly_idles_is_busy_computing() -> None:
    got = diagnose(shares([(0, "other", 0.01), (1, "previous_stage", 0.3)]), 1.0, MEANING, 2)
    assert got.cause == BUSY and got.knob == "max_wave_tokens" and got.direction == "up"
    assert "its cause: busy computing (idle only 1.0%)" in got.line


def test_a_baselines_waves_are_its_static_chunk() -> None:
    got = diagnose(shares([(0, "fill", 0.3), (1, "previous_stage", 0.5)]), 1.0, MEANING, 2, "trtllm-pp")
    assert (got.knob, got.direction) == ("static_chunk_tokens", "down") and "lower static_chunk_tokens" in got.line
    assert proposal("static_chunk_tokens", "down", Knobs(static_chunk_tokens=8192 + 64), 2, 64) == {
        "static_chunk_tokens": 4096}


def test_a_preview_moves_the_knob_once_within_its_rules() -> None:
    assert proposal("ring", "up", Knobs(), 4) == {"ring": 16}                 # 0 is 2P = 8 for wavepp
    assert proposal("ring", "up", Knobs(ring=0, policy="trtllm-pp"), 4) == {"ring": 8}
    assert proposal("max_wave_tokens", "down", Knobs(), 4, 64) == {"max_wave_tokens": 8192}
    assert proposal("max_wave_tokens", "down", Knobs(max_wave_tokens=8192), 4, 64) == {
        "max_wave_tokens": 4096, "min_wave_tokens": 4096}                    # b_min never above M
    assert proposal("max_wave_tokens", "down", Knobs(max_wave_tokens=192, min_wave_tokens=64), 4, 64) == {
        "max_wave_tokens": 64}                                               # whole blocks
    assert proposal("fill_factor", "plus", Knobs(), 4) == {"fill_factor": 3}
    assert proposal("max_leases", "up", Knobs(max_leases=1 << 20), 4) == {"max_leases": 1 << 20}
    for changes in (proposal("max_leases", "down", Knobs(), 4), proposal("max_round_requests", "up", Knobs(), 4)):
        Knobs().replace(**changes)                                          # valid knobs
