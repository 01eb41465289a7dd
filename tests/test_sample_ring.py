"""A live view's fixed-size sample store: the newest values, oldest first, in memory allocated once."""

from __future__ import annotations

import random

import numpy as np
import pytest

from wavepp.runtime.figures.report import Cadence, FigureAccumulator, _cadence, percentiles
from wavepp.runtime.figures.sample_ring import SampleRing


def test_it_holds_the_newest_values_oldest_first() -> None:
    ring = SampleRing(4)
    assert len(ring) == 0 and list(ring) == [] and percentiles(ring, (50,)) == [None]
    for x in range(1, 4):
        ring.append(float(x))
    assert list(ring) == [1.0, 2.0, 3.0]
    for x in range(4, 11):
        ring.append(float(x))
    assert len(ring) == 4 and list(ring) == [7.0, 8.0, 9.0, 10.0]
    assert percentiles(ring, (0, 50, 100)) == [7.0, 8.5, 10.0]


def test_rows_of_integers_come_back_as_tuples_of_python_ints() -> None:
    ring = SampleRing(3, np.int64, 2)
    for t in range(5):
        ring.append((10**18 + t, t % 2))
    assert list(ring) == [(10**18 + 2, 0), (10**18 + 3, 1), (10**18 + 4, 0)]
    assert all(type(v) is int for row in ring for v in row)


def test_its_memory_is_allocated_with_the_first_value_and_never_grows() -> None:
    ring = SampleRing(1000)
    assert ring._data is None
    ring.append(0.5)
    data = ring._data
    assert data is not None and data.nbytes == 8 * 1000
    for i in range(5000):
        ring.append(i / 7)
    assert ring._data is data and len(ring) == 1000
    with pytest.raises(ValueError):
        SampleRing(0)


def test_without_a_cap_it_holds_every_value_in_order() -> None:
    series, rows = SampleRing(None), SampleRing(None, np.int64, 2)
    assert list(series) == [] and percentiles(series, (50,)) == [None]
    values = [i / 7 for i in range(5000)]              # past the first allocation, doubled three times
    for i, v in enumerate(values):
        series.append(v)
        rows.append((10**18 + i, i % 3))
    assert list(series) == values and len(series) == 5000 and len(series._data) == 8192
    assert list(rows) == [(10**18 + i, i % 3) for i in range(5000)]
    assert percentiles(series, (0, 50, 100)) == percentiles(values, (0, 50, 100))


def test_a_live_aggregator_keeps_its_samples_in_rings() -> None:
    acc = FigureAccumulator(samples_held=10)
    assert isinstance(acc.latencies, SampleRing) and isinstance(acc.rounds, SampleRing)
    bench = FigureAccumulator()
    assert bench.latencies.cap is None and bench.rounds.cap is None   # the bench: every value, exact


def test_a_rings_percentiles_and_cadence_are_the_lists_to_the_last_bit() -> None:
    """A ring is sorted by numpy, a list by Python: the same figures, the same types."""
    rng = random.Random(7)
    values = [rng.lognormvariate(0, 2) for _ in range(5000)] + [0.25] * 50
    rounds = [(10**18 + rng.randrange(10**6), rng.choice([0, 0, 1, 2, 7])) for _ in range(5000)]
    rounds += [(10**18 + 5, 3), (10**18 + 5, 1), (10**18 + 5, 0)]      # ties in time: sorted by count, as tuples
    ring, round_ring = SampleRing(len(values)), SampleRing(len(rounds), np.int64, 2)
    for v in values:
        ring.append(v)
    for r in rounds:
        round_ring.append(r)
    qs = (0, 1, 12.5, 50, 90, 95, 99, 99.9, 100)
    got, want = percentiles(ring, qs), percentiles(values, qs)
    assert got == want and all(type(x) is float for x in got)
    cadence, expected = _cadence(round_ring), _cadence(rounds)
    assert cadence == expected and cadence.ends_ns[:3] and all(type(t) is int for t in cadence.ends_ns)
    assert _cadence(SampleRing(4, np.int64, 2)) == Cadence([], [])
