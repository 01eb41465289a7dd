"""Reading between the grid points of the measured kernel tables (../shared/data/perf/FORMAT.md §5).

Three shapes of table, each with the rule aiconfigurator's resolver applies to it:

* :class:`Curve` - a 1-D curve (MoE over ``num_tokens``, all-reduce over ``message_size``): raw linear
  interpolation inside, the end point's utilisation (``SOL / latency``) held outside (FORMAT §5.5).
* :class:`ContextGrid` - context attention over (num_heads, seq, batch), or the DSA module over (num_heads,
  prefix, seq, batch): the axes are resolved outermost first, ``sqrt(latency)`` is interpolated along the
  sequence axis (when the table's config says so) and raw latency along the others; a branch missing from a
  ragged grid is the survivor scaled by ``SOL(query) / SOL(survivor)`` (FORMAT §5.2). Outside the grid the
  nearest edge's utilisation is held along each axis in turn - a simplification of aiconfigurator's 4-point
  Shepard blend in log2 space (FORMAT §5.3) that gives the same value on the 1-D edges we query (a prefill
  longer than the table, a prefix longer than the DSA table's 128: the nearest measured point's util).
* :class:`GemmTable` - "scattered sites" (FORMAT §5.4): linear in raw latency along ``m`` at a collected
  ``(n, k)`` site, the median util of the last 3 points beyond its end; elsewhere the 1/d²-weighted util of
  the <= 4 nearest sites within 2 octaves in log2(n, k). Values below the roofline are raised to it first.

Every value is exact at a grid point and monotone between two neighbours whose values are monotone.
Latencies here are seconds; a ``sol`` callable gives the speed-of-light time of the same query.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Callable, Iterable, Sequence
from statistics import median


class TableCoverageError(ValueError):
    """The tables lack a shape (or a file) a lookup needs; the message is one line."""


def _lerp(x: float, x0: float, x1: float, y0: float, y1: float) -> float:
    return y0 + (y1 - y0) * (x - x0) / (x1 - x0)


class Curve:
    """Latency over one axis; ``sol(x)`` anchors the utilisation held beyond either end."""

    def __init__(self, xs: Sequence[float], ys: Sequence[float], sol: Callable[[float], float],
                 tail_util: float | None = None) -> None:
        """``tail_util``: the utilisation held beyond the last point (default: the last point's own)."""
        pairs = sorted(zip(xs, ys, strict=True))
        if not pairs:
            raise TableCoverageError("empty curve")
        self.xs = [float(x) for x, _ in pairs]
        self.ys = [float(y) for _, y in pairs]
        self._sol = sol
        self._tail_util = tail_util

    def __call__(self, x: float) -> float:
        xs, ys = self.xs, self.ys
        i = bisect_left(xs, x)
        if i < len(xs) and xs[i] == x:
            return ys[i]
        if 0 < i < len(xs):
            return _lerp(x, xs[i - 1], xs[i], ys[i - 1], ys[i])
        if i == 0 and len(xs) == 1:
            # FORMAT §5.5: a one-point curve cannot be extrapolated downwards.
            raise TableCoverageError(f"one-point curve at {xs[0]:g} cannot give {x:g}")
        if i == len(xs) and self._tail_util is not None:
            return self._sol(x) / self._tail_util
        end = 0 if i == 0 else len(xs) - 1
        return ys[end] * self._sol(x) / self._sol(xs[end])


GridPoint = tuple[int, ...]  # one measured shape, outermost axis first: (num_heads, [prefix,] seq, batch)


class ContextGrid:
    """Context-phase latency over a grid of shapes, FORMAT §5.2-5.3; every point has the same axes.

    ``sqrt_axis``: the axis along which ``sqrt(latency)`` is interpolated (the sequence axis of a plain
    attention table, whose latency grows about as s²), or None for raw latency on every axis.
    ``sol(*coords)`` is the speed-of-light time of a shape, the utilisation anchor."""

    def __init__(self, points: dict[GridPoint, float], sol: Callable[..., float], sqrt_axis: int | None = 1) -> None:
        if not points:
            raise TableCoverageError("empty context grid")
        depths = {len(p) for p in points}
        if len(depths) != 1:
            raise ValueError(f"grid points have different numbers of axes: {sorted(depths)}")
        self._depth = depths.pop()
        if sqrt_axis is not None and not 0 <= sqrt_axis < self._depth:
            raise ValueError(f"sqrt axis {sqrt_axis} out of range for {self._depth} axes")
        self._points = dict(points)
        self._sol = sol
        self._sqrt_axis = sqrt_axis
        # For each prefix of fixed outer-axis values, the sorted values present on the next axis.
        values: dict[tuple[int, ...], set[int]] = {}
        for p in points:
            for depth in range(self._depth):
                values.setdefault(p[:depth], set()).add(p[depth])
        self._values = {k: sorted(v) for k, v in values.items()}

    def __call__(self, *coords: float) -> float:
        if len(coords) != self._depth:
            raise ValueError(f"query has {len(coords)} coordinates, the grid {self._depth}")
        value = self._resolve((), coords)
        if value is None:  # cannot happen with a non-empty grid: every prefix has a full branch
            raise TableCoverageError(f"no context-table point near {coords}")
        return value

    def _ratio(self, prefix: tuple[int, ...], query: tuple[float, ...], at: float) -> float:
        """SOL(query) / SOL(query with this axis moved to ``at``), outer axes at the branch's grid values."""
        axis = len(prefix)
        here = (*prefix, query[axis], *query[axis + 1:])
        there = (*prefix, at, *query[axis + 1:])
        return self._sol(*here) / self._sol(*there)

    def _resolve(self, prefix: tuple[int, ...], query: tuple[float, ...]) -> float | None:
        axis = len(prefix)
        if axis == self._depth:
            return self._points.get(prefix)
        values = self._values.get(prefix)
        if not values:
            return None
        q = query[axis]
        i = bisect_left(values, q)
        if i < len(values) and values[i] == q:
            return self._resolve((*prefix, values[i]), query)
        if i == 0 or i == len(values):  # outside: hold the edge's utilisation
            edge = values[0] if i == 0 else values[-1]
            y = self._resolve((*prefix, edge), query)
            return None if y is None else y * self._ratio(prefix, query, edge)
        lo, hi = values[i - 1], values[i]
        y_lo = self._resolve((*prefix, lo), query)
        y_hi = self._resolve((*prefix, hi), query)
        if y_lo is None or y_hi is None:  # ragged: scale the survivor by SOL
            if y_lo is None and y_hi is None:
                return None
            at, y = (hi, y_hi) if y_lo is None else (lo, y_lo)
            assert y is not None
            return y * self._ratio(prefix, query, at)
        if axis == self._sqrt_axis:  # sqrt straightens the roughly s² curve
            return _lerp(q, lo, hi, math.sqrt(y_lo), math.sqrt(y_hi)) ** 2
        return _lerp(q, lo, hi, y_lo, y_hi)


class GemmTable:
    """GEMM latency ``Y[m, n] = X[m, k] · W[k, n]`` of one dtype, FORMAT §5.4."""

    def __init__(self, rows: Iterable[tuple[int, int, int, float]], sol: Callable[[float, float, float], float]):
        self._sol = sol
        sites: dict[tuple[int, int], list[tuple[int, float]]] = {}
        for m, n, k, latency in rows:
            sites.setdefault((n, k), []).append((m, latency))
        if not sites:
            raise TableCoverageError("empty GEMM table")
        self._sites = sites
        # A site's curve is made when first asked for: a table has ~400-500 sites, a model asks for a handful
        # (making them all was ~0.15 s of a sim bench's start-up).
        self._curves: dict[tuple[int, int], Curve] = {}
        self._near: dict[tuple[int, int], list[tuple[float, tuple[int, int]]]] = {}

    def _curve(self, site: tuple[int, int]) -> Curve:
        """The curve of a collected site."""
        curve = self._curves.get(site)
        if curve is None:
            curve = self._curves[site] = self._site_curve(site, self._sites[site])
        return curve

    def _site_curve(self, site: tuple[int, int], measured: list[tuple[int, float]]) -> Curve:
        """The site's curve through its measured points, none faster than the roofline."""
        n, k = site
        points = sorted((m, max(latency, self._sol(m, n, k))) for m, latency in measured)
        tail_util = median(self._sol(m, n, k) / lat for m, lat in points[-3:])
        return Curve([m for m, _ in points], [lat for _, lat in points], lambda m: self._sol(m, n, k),
                     tail_util=tail_util)

    def __call__(self, m: float, n: int, k: int) -> float:
        if (n, k) in self._sites:
            return self._curve((n, k))(m)
        # Not a collected site: borrow the utilisation of the nearest sites (2 octaves at most).
        near = self._nearest(n, k)
        weights = [1.0 / (d * d) for d, _ in near]
        utils = [self._sol(m, sn, sk) / self._curve((sn, sk))(m) for _, (sn, sk) in near]
        util = sum(w * u for w, u in zip(weights, utils, strict=True)) / sum(weights)
        return self._sol(m, n, k) / util

    def _nearest(self, n: int, k: int) -> list[tuple[float, tuple[int, int]]]:
        """The (distance in octaves, site) of the up to four collected sites within 2 octaves of ``(n, k)``,
        nearest first; found once per shape (a model asks for a handful of shapes at every ``m``)."""
        near = self._near.get((n, k))
        if near is None:
            ln, lk = math.log2(n), math.log2(k)
            ranked = sorted(
                (math.hypot(math.log2(sn) - ln, math.log2(sk) - lk), (sn, sk)) for sn, sk in self._sites
            )
            near = self._near[(n, k)] = [(d, s) for d, s in ranked if d <= 2.0][:4]
        if not near:
            raise TableCoverageError(f"no GEMM site within 2 octaves of n={n}, k={k}")
        return near
