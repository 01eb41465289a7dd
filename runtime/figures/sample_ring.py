"""The newest values of a series in a numpy array allocated once: what a live view keeps for its percentiles.

A live view (the dashboard, :class:`runtime.figures.report.FigureAccumulator` with ``samples_held``) keeps
the newest 100,000 values of each per-request series and of its admitting rounds. In a ``deque(maxlen=...)``
of Python floats and tuples that memory grew until the deque was full - 32 bytes a latency, ~100 a round,
half an hour or more of the embedded sim demo - so the view's memory was not flat for as long. Here it is
allocated with the first value and never grows: 8 bytes a value, 16 a round.

The bench keeps every value for its exact percentiles (``cap`` None): the same array, doubled when full - 8 to
16 bytes a value, 16 to 32 a round, where Python floats in a list took 32 and tuples of ints ~120.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

FIRST_ROWS = 1024       # rows an unbounded series allocates with its first value


class SampleRing:
    """The newest ``cap`` rows of ``width`` numbers each (``width`` 1: a plain series of values), oldest first;
    every row where ``cap`` is None."""

    def __init__(self, cap: int | None, dtype: type = np.float64, width: int = 1) -> None:
        if cap is not None and cap < 1:
            raise ValueError(f"cap must be >= 1, got {cap}")
        self.cap, self.width = cap, width
        self._dtype = dtype
        self._data: np.ndarray | None = None        # allocated with the first value
        self._next = 0                               # where the next value goes
        self._count = 0                              # values held (<= cap)

    def append(self, value: float | Sequence[float]) -> None:
        if self._data is None:
            self._data = self._zeros(self.cap or FIRST_ROWS)
        elif self.cap is None and self._count == len(self._data):
            grown = self._zeros(2 * self._count)
            grown[: self._count] = self._data
            self._data = grown
        self._data[self._next] = value
        self._count += 1
        if self.cap is None:
            self._next = self._count
        else:
            self._next = (self._next + 1) % self.cap
            self._count = min(self._count, self.cap)

    def _zeros(self, rows: int) -> np.ndarray:
        return np.zeros((rows, self.width) if self.width > 1 else rows, dtype=self._dtype)

    def __len__(self) -> int:
        return self._count

    def values(self) -> np.ndarray:
        """The rows held, oldest first (a copy)."""
        if self._data is None:
            return np.zeros((0, self.width) if self.width > 1 else 0, dtype=self._dtype)
        if self.cap is None or self._count < self.cap:
            return self._data[: self._count].copy()
        return np.concatenate((self._data[self._next:], self._data[: self._next]))

    def __iter__(self) -> Iterator[Any]:
        """Python numbers (a tuple a row where ``width`` > 1), oldest first."""
        rows = self.values().tolist()
        return iter([tuple(r) for r in rows] if self.width > 1 else rows)
