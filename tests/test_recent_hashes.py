"""The prefix ledger's compact store answers exactly what an insertion-ordered dict that forgets its
oldest entries beyond its cap answers (the ledger's semantics), across merges into its arrays."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from wavepp.runtime.figures.recent_hashes import RecentHashes


class DictReference:
    def __init__(self, cap: int) -> None:
        self.cap, self.d = cap, {}   # type: ignore[var-annotated]

    def add(self, hashes: list[int], value: int) -> None:
        for h in hashes:
            self.d.setdefault(h, value)
        if len(self.d) > self.cap:
            for h in list(itertools.islice(self.d, len(self.d) - self.cap)):
                del self.d[h]

    def prefix(self, hashes: list[int]) -> int:
        return next((i for i, h in enumerate(hashes) if h not in self.d), len(hashes))


HASH = st.one_of(st.integers(0, 40), st.sampled_from([0, 2**63 - 1, 2**63, 2**64 - 1]))


@settings(max_examples=300, deadline=None)
@given(cap=st.integers(1, 30), merge_min=st.integers(1, 8), values=st.booleans(),
       ops=st.lists(st.tuples(st.booleans(), st.lists(HASH, max_size=12)), max_size=40))
def test_it_answers_what_a_forgetting_dict_answers(cap: int, merge_min: int, values: bool, ops: list[Any]) -> None:
    ours, ref = RecentHashes(cap, merge_min=merge_min, values=values), DictReference(cap)
    for value, (insert, hashes) in enumerate(ops):
        if insert:
            ours.add(hashes, value)
            ref.add(hashes, value)
        assert ours.prefix(hashes) == ref.prefix(hashes)
        assert len(ours) == len(ref.d)
        for h in set(hashes) | set(range(41)):
            if h in ref.d:
                assert ours.value(h) == (ref.d[h] if values else 0)
            else:
                with pytest.raises(KeyError):
                    ours.value(h)


def test_a_run_of_many_hashes_is_held_in_arrays_of_a_few_bytes_each() -> None:
    ours = RecentHashes(cap=1_000_000, merge_min=1024)
    chains = [[(r << 20) + b for b in range(100)] for r in range(200)]
    for value, chain in enumerate(chains):
        ours.add(chain, value)
    assert len(ours) == 20_000 and len(ours._recent) < 5_000
    assert ours.prefix(chains[7] + [1 << 62]) == 100 and ours.value(chains[7][50]) == 7
    held = ours._keys.nbytes + ours._nums.nbytes + ours._vals.nbytes
    assert held <= 24 * len(ours)
