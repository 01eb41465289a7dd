"""Chains of block hashes recently added, each hash with a value, in about ``cap`` entries at most.

What :mod:`runtime.figures.prefix_ledger` remembers of a run: the block hashes completed requests computed
and the ones arrivals brought. A run's distinct hashes grow with its length; what a cache could still serve
does not (it holds at most its pool). So the hashes live in two generations, dicts of ``cap // 2`` entries:
additions go to the newer one, and a hash found only in the older one is copied into the newer one when it
is added again (a use); when the newer one is full (checked at the end of each :meth:`add`) it becomes the
older one and the older one is dropped. A hash is therefore remembered until at least ``cap // 2`` more
have been added after its last addition, and no longer than until ``cap`` have: a window over recency,
not over first insertion (a prefix every request reuses is never forgotten). A run of fewer than
``cap // 2`` distinct hashes forgets nothing: the answers of a dict.

Chains: a block hash names its whole prefix, and each call adds a prompt's hashes from its first block. So
a hash is held only with every hash before it in its chain (in the same generation or the newer one), and
"how many leading hashes are held" is found by probing (:func:`store.probe.longest_prefix_in`: O(log n)
lookups, not one a block - in dicts of a million random keys each lookup is a cache miss).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from wavepp.store.probe import longest_prefix_in

_MISSING = object()


class RecentHashes:
    def __init__(self, cap: int, values: bool = True) -> None:
        """``values``: keep a value a hash (else :meth:`value` answers None)."""
        if cap < 2:
            raise ValueError(f"cap must be >= 2, got {cap}")
        self.cap = cap
        self.generation = cap // 2
        self.values = values
        self._new: dict[int, Any] = {}
        self._old: dict[int, Any] = {}

    def __len__(self) -> int:
        """Entries held: the distinct hashes remembered, each counted once per generation holding it."""
        return len(self._new) + len(self._old)

    def __contains__(self, h: object) -> bool:
        return h in self._new or h in self._old

    def prefix(self, hashes: Sequence[int]) -> int:
        """How many leading ``hashes`` (a chain) are remembered."""
        return longest_prefix_in(hashes, self if self._old else self._new)[0]

    def value(self, h: int) -> Any:
        """The value ``h`` was first added with while remembered (KeyError if it is not)."""
        v = self._new.get(h, _MISSING)
        return self._old[h] if v is _MISSING else v

    def add(self, hashes: Sequence[int], value: Any = None) -> None:
        """Remember a chain from its first hash: one remembered keeps its value and is used again; a new one
        takes ``value``. Only the hashes past those already in the newer generation are written."""
        new, old = self._new, self._old
        rest = hashes[longest_prefix_in(hashes, new)[0]:]
        if old and self.values and rest:
            kept = rest[: longest_prefix_in(rest, old)[0]]
            new.update(zip(kept, map(old.__getitem__, kept), strict=True))
            rest = rest[len(kept):]
        new.update(dict.fromkeys(rest, value if self.values else None))
        if len(new) >= self.generation:
            self._old, self._new = new, {}
