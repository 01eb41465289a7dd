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


# A script of chains: each op takes a prefix (cut) of an earlier chain (pick) and extends it by fresh hashes
# (grow), then adds it (insert) or only asks for it. Chains share prefixes as prompts do.
OPS = st.lists(st.tuples(st.booleans(), st.integers(0, 1_000), st.integers(0, 12), st.integers(0, 6)), max_size=40)


def chains(ops: list[Any]) -> list[tuple[bool, list[int]]]:
    made: list[list[int]] = [[]]
    fresh = iter(range(2**63 - 1, 0, -7))                # large, distinct, as block hashes are
    out = []
    for insert, pick, cut, grow in ops:
        base = made[pick % len(made)]
        chain = base[: cut % (len(base) + 1)] + [next(fresh) for _ in range(grow)]
        made.append(chain)
        out.append((insert, chain))
    return out


@settings(max_examples=300, deadline=None)
@given(values=st.booleans(), ops=OPS)
def test_a_run_of_fewer_hashes_than_a_generation_answers_what_a_dict_answers(values: bool, ops: list[Any]) -> None:
    ours, ref = RecentHashes(2 * 6 * 40 + 2, values=values), DictReference()   # never a full generation
    for value, (insert, chain) in enumerate(chains(ops)):
        if insert:
            ours.add(chain, value)
            ref.add(chain, value)
        assert ours.prefix(chain) == ref.prefix(chain)
        for h in chain:
            assert (h in ours) == (h in ref.d)
            if h in ref.d:
                assert ours.value(h) == (ref.d[h] if values else None)
            else:
                with pytest.raises(KeyError):
                    ours.value(h)


@settings(max_examples=300, deadline=None)
@given(cap=st.integers(2, 12), values=st.booleans(), ops=OPS)
def test_it_never_answers_more_than_it_was_given_and_holds_about_its_cap(cap: int, values: bool,
                                                                         ops: list[Any]) -> None:
    ours, ref = RecentHashes(cap, values=values), DictReference()
    for value, (insert, chain) in enumerate(chains(ops)):
        if insert:
            ours.add(chain, value)
            ref.add(chain, value)
        n = ours.prefix(chain)
        assert n <= ref.prefix(chain) and all(h in ours for h in chain[:n])
        assert n == len(chain) or chain[n] not in ours          # a chain is held from its first hash
        assert len(ours) < cap + 6 * 40 + 12                     # a generation closes after the call filling it


def test_a_prefix_used_by_every_request_is_never_forgotten_and_keeps_its_first_request() -> None:
    ours = RecentHashes(100)
    hot = [1, 2, 3]
    for r in range(1_000):                           # 10 fresh hashes a request: 200 generations go by
        ours.add(hot + [1_000 + 10 * r + i for i in range(10)], f"r{r}")
        assert ours.prefix(hot) == 3 and ours.value(3) == "r0"
    assert len(ours) <= 100 + 13


@pytest.mark.parametrize("values", [True, False])
def test_a_cold_hash_is_kept_a_generation_after_its_last_use_and_gone_after_two(values: bool) -> None:
    for offset in range(50):                         # wherever in its generation the hash lands
        ours = RecentHashes(100, values=values)
        fresh = iter(range(10, 1_000_000))
        ours.add([next(fresh) for _ in range(offset)])
        ours.add([7], "first")
        ours.add([next(fresh) for _ in range(10)])
        ours.add([7], "again")                       # used again: its window starts over, its value stays
        for _ in range(49):
            ours.add([next(fresh)])
        assert 7 in ours and ours.value(7) == ("first" if values else None)
        for _ in range(51):
            ours.add([next(fresh)])
        assert 7 not in ours and ours.prefix([7, 8]) == 0
        with pytest.raises(KeyError):
            ours.value(7)


def test_a_cap_below_two_is_refused() -> None:
    with pytest.raises(ValueError, match="cap must be >= 2"):
        RecentHashes(1)
