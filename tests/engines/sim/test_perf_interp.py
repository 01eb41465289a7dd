"""Interpolation of the kernel tables (FORMAT.md §5): exact at grid points, monotone between them."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from wavepp.runtime.engines.sim.perf_interp import ContextGrid, Curve, GemmTable, TableCoverageError


def _linear_sol(x: float) -> float:
    return x


def test_curve_is_exact_at_points_and_linear_between() -> None:
    c = Curve([1, 4, 16], [1.0, 2.0, 8.0], _linear_sol)
    assert [c(1), c(4), c(16)] == [1.0, 2.0, 8.0]
    assert c(10) == pytest.approx(5.0)


def test_curve_holds_the_end_points_utilisation_outside() -> None:
    c = Curve([4, 16], [2.0, 8.0], lambda x: x * x)
    assert c(32) == pytest.approx(8.0 * 32 * 32 / (16 * 16))  # util = 16² / 8 held beyond 16
    assert c(2) == pytest.approx(2.0 * 4 / 16)
    assert Curve([4, 16], [2.0, 8.0], _linear_sol, tail_util=4.0)(32) == pytest.approx(32 / 4.0)


def test_one_point_curve_cannot_go_below() -> None:
    with pytest.raises(TableCoverageError):
        Curve([8], [1.0], _linear_sol)(4)


@given(st.lists(st.floats(0.01, 10.0), min_size=2, max_size=8), st.floats(0.0, 1.0))
def test_curve_monotone_between_monotone_points(steps: list[float], frac: float) -> None:
    ys = [sum(steps[: i + 1]) for i in range(len(steps))]  # increasing
    xs = [float(2**i) for i in range(len(ys))]
    c = Curve(xs, ys, _linear_sol)
    for i in range(len(xs) - 1):
        x = xs[i] + frac * (xs[i + 1] - xs[i])
        assert ys[i] - 1e-12 <= c(x) <= ys[i + 1] + 1e-12
        assert c(x) <= c(min(xs[i + 1], x + 0.1 * (xs[i + 1] - xs[i]))) + 1e-12


def _attention_sol(heads: float, seq: float, batch: float) -> float:
    return heads * seq * seq * batch


def _grid(missing: tuple[int, int, int] | None = None) -> ContextGrid:
    points = {(h, s, b): 1e-6 * (h * (s / 1024) ** 2 + 50 * h * s / 1024) * b
              for h in (8, 16) for s in (1024, 2048, 4096) for b in (1, 2, 4)}
    if missing:
        del points[missing]
    return ContextGrid(points, _attention_sol)


def test_context_grid_exact_at_every_grid_point() -> None:
    g = _grid()
    for h in (8, 16):
        for s in (1024, 2048, 4096):
            for b in (1, 2, 4):
                assert g(h, s, b) == 1e-6 * (h * (s / 1024) ** 2 + 50 * h * s / 1024) * b


def test_context_grid_interpolates_sqrt_latency_along_the_sequence() -> None:
    g = _grid()
    lo, hi = g(8, 1024, 1), g(8, 2048, 1)
    assert g(8, 1536, 1) == pytest.approx(((math.sqrt(lo) + math.sqrt(hi)) / 2) ** 2)
    assert g(8, 2048, 3) == pytest.approx((g(8, 2048, 2) + g(8, 2048, 4)) / 2)  # raw along batch
    assert g(12, 2048, 1) == pytest.approx((g(8, 2048, 1) + g(16, 2048, 1)) / 2)  # raw along heads


@given(st.floats(1024, 4096), st.floats(1024, 4096), st.floats(1, 4), st.sampled_from([8, 12, 16]))
def test_context_grid_monotone_inside(s1: float, s2: float, b: float, h: int) -> None:
    g = _grid()
    lo, hi = sorted((s1, s2))
    assert g(h, lo, b) <= g(h, hi, b) * (1 + 1e-12)
    assert g(h, lo, min(b, 3.0)) <= g(h, lo, max(b, 3.0)) * (1 + 1e-12)


def test_context_grid_ragged_branch_scales_the_survivor_by_sol() -> None:
    g = _grid(missing=(16, 4096, 4))
    # batch 3 at (16, 4096): the batch-4 neighbour is missing, so batch 2 is scaled by SOL (3/2).
    assert g(16, 4096, 3) == pytest.approx(_grid()(16, 4096, 2) * 3 / 2)


def test_context_grid_beyond_the_longest_sequence_holds_its_util() -> None:
    g = _grid()
    assert g(8, 8192, 1) == pytest.approx(g(8, 4096, 1) * 4.0)  # SOL grows as s²


def _dsa_like_sol(heads: float, prefix: float, seq: float, batch: float) -> float:
    return heads * seq * (1000 + prefix + seq) * batch  # per-token work plus scores against prefix + seq keys


def test_four_axis_grid_blends_raw_and_holds_the_last_prefix_util() -> None:
    """The DSA module's shape: (heads, prefix, seq, batch), prefixes 0 and 128 measured, raw blending."""
    points = {(h, p, s, b): 2e-9 * _dsa_like_sol(h, p, s, b)
              for h in (16, 32) for p in (0, 128) for s in (1024, 2048) for b in (1, 2)}
    points[(32, 128, 2048, 1)] *= 1.5  # one slower point: its util is what a longer prefix holds
    g = ContextGrid(points, _dsa_like_sol, sqrt_axis=None)
    assert g(32, 128, 2048, 1) == points[(32, 128, 2048, 1)]
    assert g(32, 64, 2048, 1) == pytest.approx((points[(32, 0, 2048, 1)] + points[(32, 128, 2048, 1)]) / 2)
    assert g(32, 128, 1536, 1) == pytest.approx((points[(32, 128, 1024, 1)] + points[(32, 128, 2048, 1)]) / 2)
    held = points[(32, 128, 2048, 1)] * _dsa_like_sol(32, 32768, 2048, 1) / _dsa_like_sol(32, 128, 2048, 1)
    assert g(32, 32768, 2048, 1) == pytest.approx(held)
    with pytest.raises(ValueError):
        g(32, 128, 2048)  # a 4-axis grid takes 4 coordinates


def _gemm_sol(m: float, n: float, k: float) -> float:
    return 2.0 * m * n * k / 1e15


def test_gemm_exact_at_sites_raised_to_roofline_and_util_borrowed_elsewhere() -> None:
    rows = [(m, n, k, 2.0 * _gemm_sol(m, n, k)) for m in (16, 32, 64) for n, k in ((1024, 1024), (2048, 1024))]
    rows.append((128, 1024, 1024, 0.5 * _gemm_sol(128, 1024, 1024)))  # faster than light: raised
    t = GemmTable(rows, _gemm_sol)
    assert t(32, 1024, 1024) == 2.0 * _gemm_sol(32, 1024, 1024)
    assert t(128, 1024, 1024) == _gemm_sol(128, 1024, 1024)
    assert t(48, 2048, 1024) == pytest.approx(2.0 * (_gemm_sol(32, 2048, 1024) + _gemm_sol(64, 2048, 1024)) / 2)
    assert t(32, 1536, 1024) == pytest.approx(2.0 * _gemm_sol(32, 1536, 1024))  # util 0.5 borrowed
    with pytest.raises(TableCoverageError):
        t(32, 65536, 65536)  # no site within 2 octaves


def test_gemm_borrowed_utilisation_is_the_same_at_every_m_whatever_was_asked_before() -> None:
    """The nearest sites of an uncollected shape are found once; later queries at other ``m`` and other
    shapes answer exactly what a fresh table answers."""
    rows = [(m, n, k, (1.5 + (n + k + m) % 7 / 10) * _gemm_sol(m, n, k))
            for m in (16, 64, 256) for n, k in ((1024, 1024), (2048, 1024), (1024, 4096), (4096, 4096))]
    warm = GemmTable(rows, _gemm_sol)
    queries = [(m, n, k) for n, k in ((1536, 1024), (3072, 2048), (1024, 2048)) for m in (8, 40, 100, 300)]
    answers = [warm(*q) for q in queries + queries[::-1]]
    fresh = [GemmTable(rows, _gemm_sol)(*q) for q in queries + queries[::-1]]
    assert answers == fresh
    with pytest.raises(TableCoverageError):
        warm(32, 65536, 65536)
    with pytest.raises(TableCoverageError):   # asked again: still refused, not answered from a cache
        warm(16, 65536, 65536)
