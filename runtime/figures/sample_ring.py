"""The newest values of a series in a numpy array allocated once: what a live view keeps for its percentiles.

A live view (the dashboard, :class:`runtime.figures.report.FigureAccumulator` with ``samples_held``) keeps
the newest 100,000 values of each per-request series and of its admitting rounds. In a ``deque(maxlen=...)``
of Python floats and tuples that memory grew until the deque was full - 32 bytes a latency, ~100 a round,
half an hour or more of the embedded sim demo - so the view's memory was not flat for as long. Here it is
allocated with the first value and never grows: 8 bytes a value, 16 a round.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np


class SampleRing:
    """The newest ``cap`` rows of ``width`` numbers each (``width`` 1: a plain series of values), oldest first."""

    def __init__(self, cap: int, dtype: type = np.float64, width: int = 1) -> None:
        if cap < 1:
            raise ValueError(f"cap must be >= 1, got {cap}")
        self.cap, self.width = cap, width
        self._dtype = dtype
        self._data: np.ndarray | None = None        # allocated with the first value
        self._next = 0                               # where the next value goes
        self._count = 0                              # values held (<= cap)

    def append(self, value: float | Sequence[float]) -> None:
        if self._data is None:
            self._data = np.zeros((self.cap, self.width) if self.width > 1 else self.cap, dtype=self._dtype)
        self._data[self._next] = value
        self._next = (self._next + 1) % self.cap
        self._count = min(self._count + 1, self.cap)

    def __len__(self) -> int:
        return self._count

    def values(self) -> np.ndarray:
        """The rows held, oldest first (a copy)."""
        if self._data is None:
            return np.zeros((0, self.width) if self.width > 1 else 0, dtype=self._dtype)
        if self._count < self.cap:
            return self._data[: self._count].copy()
        return np.concatenate((self._data[self._next:], self._data[: self._next]))

    def __iter__(self) -> Iterator[Any]:
        """Python numbers (a tuple a row where ``width`` > 1), oldest first."""
        rows = self.values().tolist()
        return iter([tuple(r) for r in rows] if self.width > 1 else rows)
