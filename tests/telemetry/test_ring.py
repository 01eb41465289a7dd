"""The bounded span ring hands a reader what arrived after its position, oldest first, from the
spans it still holds (the oldest dropped once it is full)."""

from __future__ import annotations

from typing import Any

from tests.gc_reach import tracked_within
from wavepp.telemetry.ring import SpanRing


def fill(ring: SpanRing, n: int) -> None:
    for _ in range(n):
        ring.append({"n": "s", "i": ring.read(0)[1] + 1})


def ids(items: list[dict[str, Any]]) -> list[int]:
    return [int(s["i"]) for s in items]


def test_a_reader_gets_what_arrived_after_its_position() -> None:
    ring = SpanRing(capacity=10)
    fill(ring, 4)
    items, last = ring.read(0)
    assert ids(items) == [1, 2, 3, 4] and last == 4
    fill(ring, 3)
    assert ids(ring.read(last)[0]) == [5, 6, 7]
    assert ids(ring.read(7)[0]) == [] and ring.read(9)[0] == []


def test_a_full_ring_holds_the_newest_spans() -> None:
    ring = SpanRing(capacity=10)
    fill(ring, 25)
    assert ids(ring.read(0)[0]) == list(range(16, 26))      # fell behind: what is still held
    assert ids(ring.read(20)[0]) == [21, 22, 23, 24, 25]
    assert ring.read(25) == ([], 25)


def test_held_spans_add_no_object_for_the_garbage_collector_to_walk() -> None:
    # A full collection stops the runtime's loop for as long as it walks the tracked objects:
    # the ring's 200,000 spans must not be ~800,000 of them.
    ring = SpanRing(capacity=5_000)
    fill(ring, 2_000)
    assert tracked_within(ring) < 20
    assert ids(ring.read(1_990)[0]) == list(range(1_991, 2_001))
