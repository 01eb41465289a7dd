"""A long-running process (a runtime's real-time loop, the dashboard) freezes what its start-up made and
collects its young objects less often: full collections, which stop its loop, walk less and come less often."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from wavepp.runtime.process_gc import LONG_RUNNING_GEN0, collect_as_long_running


@pytest.fixture
def restored() -> Iterator[None]:
    saved = gc.get_threshold()
    try:
        yield
    finally:
        gc.unfreeze()
        gc.set_threshold(*saved)


class Node:
    def __init__(self) -> None:
        self.other: Node | None = None


def test_start_up_objects_are_frozen_and_garbage_collected_first(restored: None) -> None:
    gc.set_threshold(700, 10, 10)
    kept = [Node() for _ in range(1_000)]
    a, b = Node(), Node()
    a.other, b.other = b, a               # a cycle nobody reaches: garbage, which must not be frozen
    cycle = weakref.ref(a)
    del a, b
    collect_as_long_running()
    assert cycle() is None
    assert gc.get_threshold() == (LONG_RUNNING_GEN0, 10, 10)
    assert gc.get_freeze_count() > len(kept)
    assert not any(isinstance(o, Node) for o in gc.get_objects())   # the kept ones frozen: walked no more
    made_after = Node()
    assert any(o is made_after for o in gc.get_objects())            # what the run makes is collected as before


def test_a_higher_young_threshold_is_kept(restored: None) -> None:
    gc.set_threshold(50_000, 5, 5)
    collect_as_long_running()
    assert gc.get_threshold() == (50_000, 5, 5)
