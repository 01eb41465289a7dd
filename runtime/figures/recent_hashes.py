"""The distinct 64-bit block hashes of a run's last ``cap`` insertions, each with a value, compact once many.

What :mod:`runtime.figures.prefix_ledger` remembers of a run: every block hash a completed request computed
and every one an arrival brought, up to millions. A Python dict of ints takes ~70-100 bytes a hash (a
12,000-request trace replay: ~200 MB, growing with the run), so past ``merge_min`` insertions they move into
sorted numpy arrays (hash, insertion number[, value]: 16-24 bytes each); the newest stay in an
insertion-ordered dict (``_recent``), which a run of fewer distinct hashes never leaves.

The semantics are those of an insertion-ordered dict that forgets its oldest entries beyond ``cap``
after each :meth:`add`: each insertion of a hash not present takes the next insertion number, and a hash
is present while its number is among the last ``cap`` taken. Adding a present hash changes nothing (it
keeps its place and its value, as ``dict.setdefault`` does). In the arrays, forgetting is the count moving
on: a forgotten entry stays, unseen, until the next merge drops it.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import numpy as np

# Entries the dict holds before its first merge into the arrays (later: a quarter of theirs). A lookup in the
# sorted arrays costs tens of microseconds where a dict's costs one: with the first merge at 131,072 the
# three-times Mooncake replay (1.05M hashes) ran 5 % slower for 45 MB less at its peak (~600 MB); at 1M, the
# arrays take over only at its end.
MERGE_MIN = 1 << 20


class RecentHashes:
    def __init__(self, cap: int, merge_min: int = MERGE_MIN, values: bool = True) -> None:
        """``values``: keep each hash's value (else :meth:`value` answers 0 and the arrays do not hold it)."""
        if cap < 1:
            raise ValueError(f"cap must be >= 1, got {cap}")
        self.cap = cap
        self.merge_min = merge_min
        self.values = values
        self._recent: dict[int, Any] = {}                  # numbered _base, _base + 1, ... in order; all present
        self._base = 0
        self._keys = np.zeros(0, dtype=np.uint64)           # sorted; numbered below _base
        self._nums = np.zeros(0, dtype=np.int64)
        self._vals = np.zeros(0, dtype=np.int64)

    def __len__(self) -> int:
        return min(self._base + len(self._recent), self.cap)

    def _low(self) -> int:
        """The oldest insertion number still present."""
        return self._base + len(self._recent) - self.cap

    def _in_arrays(self, hashes: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
        """The hashes as an array, and per hash whether the arrays hold it present."""
        keys = self._keys
        arr = np.array(hashes, dtype=np.uint64)
        # Sorted queries: a search starts where the previous one ended (600 hashes in 1M keys: 27 us
        # sorted, 179 us in a prompt's order, where every search misses the cache from the top).
        order = np.argsort(arr)
        pos = np.empty_like(order)
        pos[order] = np.searchsorted(keys, arr[order])
        pos[pos == len(keys)] = 0
        return arr, (keys[pos] == arr) & (self._nums[pos] >= self._low())

    def prefix(self, hashes: Sequence[int]) -> int:
        """How many leading ``hashes`` are present."""
        recent = self._recent
        n = 0
        for h in hashes:
            if h not in recent:
                break
            n += 1
        if n == len(hashes) or not len(self._keys):
            return n
        rest = hashes[n:]
        start, size = 0, 8           # a few first: a prompt's first hash past the dict is most often new
        while start < len(rest):
            part = rest[start:start + size]
            for j in np.flatnonzero(~self._in_arrays(part)[1]).tolist():    # not in the arrays
                if part[j] not in recent:
                    return n + start + j
            start, size = start + size, size * 8
        return len(hashes)

    def value(self, h: int) -> int:
        """The value ``h`` was inserted with (KeyError if it is not present)."""
        if h in self._recent:
            return int(self._recent[h] or 0)
        if not len(self._keys) or not self._in_arrays([h])[1][0]:
            raise KeyError(h)
        return int(self._vals[np.searchsorted(self._keys, np.uint64(h))]) if self.values else 0

    def add(self, hashes: Sequence[int], value: int = 0) -> None:
        """Insert each hash not present, in order, with ``value``; then forget beyond the cap."""
        recent = self._recent
        if len(self._keys) and hashes:
            arr, there = self._in_arrays(hashes)
            hashes = arr[~there].tolist()
        if self.values:
            for h in hashes:
                recent.setdefault(h, value)
        else:
            recent.update(dict.fromkeys(hashes))        # a hash already there keeps its place
        forget = self._low() - self._base
        if forget > 0:
            for h in list(itertools.islice(recent, forget)):
                del recent[h]
            self._base += forget
        if len(recent) >= max(self.merge_min, len(self._keys) // 4):
            self._merge()

    def _merge(self) -> None:
        """The dict's entries into the arrays; the forgotten ones, and any a newer entry supersedes, dropped."""
        recent, low = self._recent, self._low()
        rk = np.fromiter(recent.keys(), dtype=np.uint64, count=len(recent))
        rn = np.arange(self._base, self._base + len(recent), dtype=np.int64)
        rv = (np.fromiter(recent.values(), dtype=np.int64, count=len(recent)) if self.values
              else np.zeros(0, dtype=np.int64))
        self._base += len(recent)
        recent.clear()
        keys = self._keys
        keep = self._nums >= low
        if len(keys):
            pos = np.searchsorted(keys, rk)
            inside = pos < len(keys)
            pos = pos[inside]
            keep[pos[keys[pos] == rk[inside]]] = False      # forgotten, inserted again: the new entry
        keys, nums = keys[keep], self._nums[keep]
        order = np.argsort(rk)
        at = np.searchsorted(keys, rk[order])
        self._keys, self._nums = np.insert(keys, at, rk[order]), np.insert(nums, at, rn[order])
        if self.values:
            self._vals = np.insert(self._vals[keep], at, rv[order])
