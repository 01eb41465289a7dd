"""Longest resident prefix: exponential probe + binary search agrees with a linear walk in O(log n) probes."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from wavepp.store.probe import longest_prefix, longest_prefix_in, longest_prefix_linear


class Residency:
    """A set of resident hashes that counts membership probes."""

    def __init__(self, resident: set[int]) -> None:
        self.resident = resident
        self.probes = 0

    def __call__(self, h: int) -> bool:
        self.probes += 1
        return h in self.resident


@st.composite
def prefix_closed(draw: st.DrawFn) -> tuple[list[int], set[int], int]:
    """Hashes of m blocks with a resident prefix of n <= m, plus maybe other prompts' resident hashes."""
    m = draw(st.integers(min_value=0, max_value=300))
    n = draw(st.integers(min_value=0, max_value=m))
    hashes = [1000 + 7 * i for i in range(m)]        # distinct, not equal to their index
    resident = set(hashes[:n])
    if draw(st.booleans()):
        # blocks of other prompts (not multiples-of-7 offsets, so never one of ours)
        resident |= set(draw(st.lists(st.integers(min_value=0, max_value=5000).map(lambda x: 7 * x + 3),
                                      max_size=30)))
    return hashes, resident, n


@given(prefix_closed())
def test_matches_linear_walk(case: tuple[list[int], set[int], int]) -> None:
    """longest_prefix == longest_prefix_linear == n on random prefix-closed residency."""
    hashes, resident, n = case
    assert longest_prefix(hashes, Residency(resident)) == n
    assert longest_prefix_linear(hashes, Residency(resident)) == n


@given(st.integers(min_value=1, max_value=200), st.data())
def test_gap_gives_a_boundary_never_below_the_first_miss(m: int, data: st.DataObject) -> None:
    """Not prefix-closed (stale hint): the answer is a resident/miss boundary at or after the first miss.

    An O(log n) probe cannot find the first miss exactly when residents follow a gap; the hint may
    overestimate (the lease confirms), but it never claims a block that is not resident at its end.
    """
    hashes = list(range(100, 100 + m))
    resident = set(data.draw(st.sets(st.sampled_from(hashes))))
    got = longest_prefix(hashes, Residency(resident))
    assert got >= longest_prefix_linear(hashes, Residency(resident))
    assert got == 0 or hashes[got - 1] in resident
    assert got == m or hashes[got] not in resident


def test_empty_and_edges() -> None:
    """No hashes -> 0; first block missing -> 0; everything resident -> m."""
    assert longest_prefix([], Residency(set())) == 0
    assert longest_prefix([5, 6, 7], Residency({6, 7})) == 0
    assert longest_prefix([5, 6, 7], Residency({5, 6, 7})) == 3
    assert longest_prefix([5], Residency({5})) == 1


def _bound(n: int) -> int:
    return 2 * math.ceil(math.log2(n + 1)) + 2


@pytest.mark.parametrize("n", [0, 1, 2, 3, 7, 8, 100, 1023, 1024, 4095, 65_537, 99_999, 100_000])
@pytest.mark.parametrize("slack", [0, 1, 1_000])
def test_probe_count_is_logarithmic(n: int, slack: int) -> None:
    """At most 2*ceil(log2(n+1))+2 probes for a resident prefix of n blocks, whatever the prompt length."""
    hashes = range(n + slack)
    res = Residency(set(range(n)))
    assert longest_prefix(hashes, res) == n
    assert res.probes <= _bound(n), (n, slack, res.probes)


@given(st.integers(min_value=0, max_value=100_000))
def test_probe_count_bound_for_any_n(n: int) -> None:
    """The O(log n) bound holds for every n up to 100k (a long prompt, a short resident prefix)."""
    hashes = range(n + 3)
    res = Residency(set(range(n)))
    assert longest_prefix(hashes, res) == n
    assert res.probes <= _bound(n)


def test_far_fewer_probes_than_linear() -> None:
    """On a 100k-block prompt fully resident the probe beats the walk by orders of magnitude."""
    hashes = range(100_000)
    fast, slow = Residency(set(hashes)), Residency(set(hashes))
    assert longest_prefix(hashes, fast) == longest_prefix_linear(hashes, slow) == 100_000
    assert fast.probes <= 40 and slow.probes == 100_000


@given(prefix_closed(), st.integers(min_value=0, max_value=320), st.one_of(st.none(), st.integers(0, 320)))
def test_a_guess_never_changes_the_answer(case: tuple[list[int], set[int], int], guess: int,
                                          end: int | None) -> None:
    """Another stage's answer as the starting guess: right or wrong, the length is the unguessed one, and both
    forms (callback and container) agree on it and on the probes."""
    hashes, resident, _ = case
    plain = longest_prefix(hashes, Residency(resident), end)
    counted = Residency(resident)
    assert longest_prefix(hashes, counted, end, guess=guess) == plain
    assert longest_prefix_in(hashes, resident, end, guess=guess) == (plain, counted.probes)


@pytest.mark.parametrize("n", [1, 2, 7, 2044, 99_999])
def test_a_right_guess_takes_two_probes(n: int) -> None:
    """Stages that agree (the usual case) cost two probes each after the first: the guess's last block is
    resident, the next one is not; one probe where the guess is the whole prompt."""
    hashes = range(n + 4)
    res = Residency(set(range(n)))
    assert longest_prefix(hashes, res, guess=n) == n and res.probes == 2
    whole = Residency(set(range(n)))
    assert longest_prefix(range(n), whole, guess=n) == n and whole.probes == 1
