"""Block hashes recently added, each with a value, in about ``cap`` entries at most.

What :mod:`runtime.figures.prefix_ledger` remembers of a run: the block hashes completed requests computed
and the ones arrivals brought. A run's distinct hashes grow with its length; what a cache could still serve
does not (it holds at most its pool). So the hashes live in two generations, dicts of ``cap // 2`` entries:
additions go to the newer one, and a hash found only in the older one is copied into the newer one when it
is added again (a use); when the newer one is full (checked at the end of each :meth:`add`) it becomes the
older one and the older one is dropped. A hash is therefore remembered until at least ``cap // 2`` more
have been added after its last addition, and no longer than until ``cap`` have: a window over recency,
not over first insertion (a prefix every request reuses is never forgotten). A run of fewer than
``cap // 2`` distinct hashes forgets nothing: the answers of a dict.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

_MISSING = object()


class RecentHashes:
    def __init__(self, cap: int) -> None:
        if cap < 2:
            raise ValueError(f"cap must be >= 2, got {cap}")
        self.cap = cap
        self.generation = cap // 2
        self._new: dict[int, Any] = {}
        self._old: dict[int, Any] = {}

    def __len__(self) -> int:
        """Entries held: the distinct hashes remembered, each counted once per generation holding it."""
        return len(self._new) + len(self._old)

    def __contains__(self, h: int) -> bool:
        return h in self._new or h in self._old

    def prefix(self, hashes: Sequence[int]) -> int:
        """How many leading ``hashes`` are remembered."""
        new, old = self._new, self._old
        n = 0
        for h in hashes:
            if h not in new and h not in old:
                break
            n += 1
        return n

    def value(self, h: int) -> Any:
        """The value ``h`` was first added with while remembered (KeyError if it is not)."""
        v = self._new.get(h, _MISSING)
        return self._old[h] if v is _MISSING else v

    def add(self, hashes: Sequence[int], value: Any = None) -> None:
        """Remember each hash: one remembered keeps its value and is used again; a new one takes ``value``."""
        new, old = self._new, self._old
        if not old:
            for h in hashes:
                if h not in new:
                    new[h] = value
        else:
            for h in hashes:
                if h not in new:
                    new[h] = old.get(h, value)
        if len(new) >= self.generation:
            self._old, self._new = new, {}
