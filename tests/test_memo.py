"""The bounded memo: at most its capacity, the least recently used forgotten first."""

from __future__ import annotations

import pytest

from wavepp.runtime.memo import LruMemo


def test_the_least_recently_used_value_goes_first() -> None:
    memo: LruMemo[str, int] = LruMemo(2)
    memo.put("a", 1)
    memo.put("b", 2)
    assert memo.get("a") == 1                   # "a" is now the most recently used
    memo.put("c", 3)
    assert len(memo) == 2
    assert memo.get("b") is None and memo.get("a") == 1 and memo.get("c") == 3
    assert memo.misses == 1


def test_a_memo_holds_at_least_one_value() -> None:
    with pytest.raises(ValueError, match="at least one"):
        LruMemo(0)
