"""Spans -> dashboard tables: lanes, bubbles, sliding-window busy fraction, knob markers."""

from __future__ import annotations

import pytest

from wavepp.dashboard.diagnosis import diagnose
from wavepp.dashboard.frames import build, busy_over_time, idle_shares, idle_window, stage_idle
from wavepp.runtime.figures.idle_causes import MEANING, idle_intervals
from wavepp.telemetry import names as N

S = 1_000_000_000   # ns per second


def span(name: str, t0: float, t1: float, **attrs: object) -> dict:
    return {"n": name, "t0": int(t0 * S), "t1": int(t1 * S), "a": dict(attrs), "id": f"{name}{t0}"}


def run() -> list[dict]:
    return [
        span(N.EXECUTE, 0.0, 1.0, **{N.STAGE: 0, N.WAVE_ID: 0, N.TOKENS: 100}),
        span(N.EXECUTE, 1.0, 2.0, **{N.STAGE: 1, N.WAVE_ID: 0, N.TOKENS: 100}),
        span(N.EXECUTE, 1.5, 2.5, **{N.STAGE: 0, N.WAVE_ID: 1, N.TOKENS: 50}),
        span(N.MATERIALIZE, 1.4, 1.5, **{N.STAGE: 0, N.WAVE_ID: 1}),
        {**span(N.WAVE_PLAN, 1.2, 1.2, **{N.WAVE_ID: 1, N.BUDGET: 4096, N.TOKENS: 50}),
         "ev": [[N.EVENT_KNOBS, int(1.2 * S),
                 {N.KNOBS_CHANGED: ["max_wave_tokens"], "wavepp.knobs.max_wave_tokens": 4096}]]},
        {**span(N.REQUEST, 0.0, 2.5, **{N.REQUEST_ID: "r1", N.GEN_AI_INPUT_TOKENS: 150, N.REUSED_TOKENS: 64}),
         "ev": [[N.EVENT_ADMITTED, int(0.1 * S), {}]]},
    ]


def test_tables_hold_what_the_spans_say() -> None:
    fr = build(run())
    assert fr.num_stages == 2 and fr.end == pytest.approx(2.5)
    assert sorted(fr.steps["kind"].unique()) == ["execute", "materialize"]
    assert fr.requests.iloc[0]["admitted"] == pytest.approx(0.1)
    assert fr.plans.iloc[0]["budget"] == 4096
    assert fr.knob_marks == [(pytest.approx(1.2), "max_wave_tokens=4096")]


def test_bubbles_are_the_idle_intervals_of_the_one_split_clipped_to_the_window() -> None:
    spans = run()
    fr = build(spans)
    intervals = idle_intervals(spans, 2, 0, int(2.5 * S))
    df = idle_window(intervals, fr.origin_ns, 0.0, 2.5)
    got = [(s, round(a, 6), round(b, 6), c)
           for s, a, b, c in df[["stage", "t0", "t1", "cause"]].itertuples(index=False)]
    assert got == [(0, 1.0, 1.2, "no_work"), (0, 1.2, 1.4, "other"), (0, 1.4, 1.5, "preparation"),
                   (1, 0.0, 1.0, "fill"), (1, 2.0, 2.5, "drain")]
    # Live: stage 1 may still be computing after its last finished step - not drawn as idle.
    assert "drain" not in set(idle_window(intervals, fr.origin_ns, 0.0, 2.5, live=True)["cause"])
    window = idle_window(intervals, fr.origin_ns, 1.1, 2.5)            # clipped to the window
    assert window["t0"].min() == pytest.approx(1.1)
    shares = idle_shares(window, 2, 1.4)
    assert shares[shares["stage"] == 0]["share"].sum() == pytest.approx(0.4 / 1.4)
    line = diagnose(shares, 1.4, MEANING, 2).line
    assert line.startswith("In the last 1.400 s, stage 0 is the bottleneck (busy 71.4%); its own cause: "
                           "unexplained (event-loop turns) (idle 28.6%: 14.3% unexplained"), line
    assert "It starves no stage: stage 1, which it feeds, never waits on it (idle 35.7%: 35.7% pipeline " \
           "draining)." in line, line
    assert line.endswith("No knob addresses this cause."), line
    assert stage_idle(shares, 2) == pytest.approx([0.4 / 1.4, 0.5 / 1.4])


def test_the_window_ends_at_a_knob_change_after_the_last_step() -> None:
    """A knob change just made on a live run belongs in the detail window."""
    late = {**span(N.WAVE_PLAN, 3.0, 3.0, **{N.WAVE_ID: 2, N.TOKENS: 0}),
            "ev": [[N.EVENT_KNOBS, int(3.0 * S), {N.KNOBS_CHANGED: ["ring"], "wavepp.knobs.ring": 2}]]}
    assert build(run() + [late]).end == pytest.approx(3.0)


def test_busy_fraction_over_a_window() -> None:
    fr = build(run())
    df = busy_over_time(fr.steps, 2, window=2.5, points=1)
    got = dict(zip(df["stage"], df["busy"], strict=True))
    assert got["stage 0"] == pytest.approx(2.0 / 2.5)
    assert got["stage 1"] == pytest.approx(1.0 / 2.5)
    assert got["pipeline efficiency"] == pytest.approx(2.0 / 2.5)


def test_latency_percentiles_only_where_a_bin_holds_enough_samples() -> None:
    """Today p95/p99 came from ~4 samples per bin and lines joined across empty bins."""
    import math

    import pandas as pd

    from wavepp.dashboard.frames import min_samples, percentiles_by_bin
    assert (min_samples(50), min_samples(95), min_samples(99)) == (2, 20, 100)
    # bin (0, 1]: empty; (1, 2]: 3 samples; (2, 3]: 25 samples
    times = pd.Series([1.5] * 3 + [2.5] * 25)
    values = pd.Series([1.0, 2.0, 3.0] + [float(i) for i in range(25)])
    df = percentiles_by_bin(times, values, [0.0, 1.0, 2.0, 3.0])
    got = {(t, p): v for t, p, v in df.itertuples(index=False)}
    assert all(math.isnan(got[(1.0, p)]) for p in ("p50", "p95", "p99"))      # empty: a gap, not a joined line
    assert got[(2.0, "p50")] == 2.0 and math.isnan(got[(2.0, "p95")])        # 3 samples: a median, no p95
    assert got[(3.0, "p95")] == pytest.approx(22.8) and math.isnan(got[(3.0, "p99")])


def test_the_whole_run_strip_is_each_stages_busy_share_per_bin() -> None:
    """busy_bins (the Pipeline page's whole-run chart) against a brute-force overlap, overlapping
    steps counted once."""
    import random

    import numpy as np
    import pandas as pd

    from wavepp.dashboard.frames import busy_bins
    rng = random.Random(3)
    for _ in range(100):
        rows, t = [], 0.0
        for k in range(rng.randint(0, 12)):
            t += rng.random()
            d = rng.random()
            rows.append((0, "execute", t, t + d, k, 1))
            t += d * rng.choice([1.0, 0.5])                 # some steps overlap the next
        steps = pd.DataFrame(rows + [(0, "send", 0.0, t, 0, 1)], columns=["stage", "kind", "t0", "t1", "wave",
                                                                          "tokens"])
        bins = rng.randint(1, 30)
        edges = np.linspace(0.0, t + 1, bins + 1)
        union: list[list[float]] = []
        for _, _, a, b, _, _ in sorted(rows, key=lambda r: r[2]):
            if union and a <= union[-1][1]:
                union[-1][1] = max(union[-1][1], b)
            else:
                union.append([a, b])
        want = [sum(max(0.0, min(b, hi) - max(a, lo)) for a, b in union) / (hi - lo)
                for lo, hi in zip(edges[:-1], edges[1:], strict=True)]
        assert busy_bins(steps, 1, 0.0, t + 1, bins)[0] == pytest.approx(want, abs=1e-9)
