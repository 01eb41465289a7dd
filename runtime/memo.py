"""A memo of bounded size: the values a pure function gave for the keys used most recently."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class LruMemo(Generic[K, V]):
    """At most ``capacity`` values, the least recently used forgotten first. For pure functions only: a
    value made again after it was forgotten is the same value, so the capacity changes the time a
    caller takes, never what it computes."""

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"a memo holds at least one value, got capacity {capacity}")
        self.capacity = capacity
        self._values: OrderedDict[K, V] = OrderedDict()
        self.misses = 0

    def __len__(self) -> int:
        return len(self._values)

    def get(self, key: K) -> V | None:
        """The value remembered for ``key`` (now the most recently used), else None (a miss)."""
        value = self._values.get(key)
        if value is None:
            self.misses += 1
        else:
            self._values.move_to_end(key)
        return value

    def put(self, key: K, value: V) -> V:
        """Remember ``value`` for ``key``; answers it."""
        values = self._values
        values[key] = value
        if len(values) > self.capacity:
            values.popitem(last=False)
        return value
