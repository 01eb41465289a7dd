"""The prefix ledger's window over recency: a dict while a run is small, never a hash it was not given,
a hash used again kept however long the run, a cold one forgotten, its size bounded by its cap."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from wavepp.runtime.figures.recent_hashes import RecentHashes


class DictReference:
    """Every hash ever added, with the value it was first added with."""

    def __init__(self) -> None:
        self.d: dict[int, Any] = {}

    def add(self, hashes: list[int], value: Any) -> None:
        for h in hashes:
            self.d.setdefault(h, value)

    def prefix(self, hashes: list[int]) -> int:
        return next((i for i, h in enumerate(hashes) if h not in self.d), len(hashes))


HASH = st.one_of(st.integers(0, 40), st.sampled_from([0, 2**63 - 1, 2**63, 2**64 - 1]))
OPS = st.lists(st.tuples(st.booleans(), st.lists(HASH, max_size=12)), max_size=40)


@settings(max_examples=300, deadline=None)
@given(ops=OPS)
def test_a_run_of_fewer_hashes_than_a_generation_answers_what_a_dict_answers(ops: list[Any]) -> None:
    ours, ref = RecentHashes(2 * 45 + 2), DictReference()        # 45 distinct hashes at most: one generation
    for value, (insert, hashes) in enumerate(ops):
        if insert:
            ours.add(hashes, value)
            ref.add(hashes, value)
        assert ours.prefix(hashes) == ref.prefix(hashes)
        for h in set(hashes) | set(range(41)):
            assert (h in ours) == (h in ref.d)
            if h in ref.d:
                assert ours.value(h) == ref.d[h]
            else:
                with pytest.raises(KeyError):
                    ours.value(h)


@settings(max_examples=300, deadline=None)
@given(cap=st.integers(2, 12), ops=OPS)
def test_it_never_answers_more_than_it_was_given_and_holds_about_its_cap(cap: int, ops: list[Any]) -> None:
    ours, ref = RecentHashes(cap), DictReference()
    for value, (insert, hashes) in enumerate(ops):
        if insert:
            ours.add(hashes, value)
            ref.add(hashes, value)
        assert ours.prefix(hashes) <= ref.prefix(hashes)
        assert all(h in ref.d for h in range(41) if h in ours)
        assert len(ours) < cap + 12                  # a generation closes at the end of the call that fills it


def test_a_prefix_used_by_every_request_is_never_forgotten_and_keeps_its_first_request() -> None:
    ours = RecentHashes(100)
    hot = [1, 2, 3]
    for r in range(1_000):                           # 10 fresh hashes a request: 200 generations go by
        ours.add(hot + [1_000 + 10 * r + i for i in range(10)], f"r{r}")
        assert ours.prefix(hot) == 3 and ours.value(3) == "r0"
    assert len(ours) <= 100 + 13


def test_a_cold_hash_is_kept_a_generation_after_its_last_use_and_gone_after_two() -> None:
    for offset in range(50):                         # wherever in its generation the hash lands
        ours = RecentHashes(100)
        fresh = iter(range(10, 1_000_000))
        ours.add([next(fresh) for _ in range(offset)])
        ours.add([7], "first")
        ours.add([next(fresh) for _ in range(10)])
        ours.add([7], "again")                       # used again: its window starts over, its value stays
        for _ in range(49):
            ours.add([next(fresh)])
        assert 7 in ours and ours.value(7) == "first"
        for _ in range(51):
            ours.add([next(fresh)])
        assert 7 not in ours and ours.prefix([7, 8]) == 0
        with pytest.raises(KeyError):
            ours.value(7)


def test_a_cap_below_two_is_refused() -> None:
    with pytest.raises(ValueError, match="cap must be >= 2"):
        RecentHashes(1)
