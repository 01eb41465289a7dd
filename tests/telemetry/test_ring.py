"""The bounded span ring hands a reader what arrived after its position, oldest first, from the
spans it still holds (the oldest dropped once it is full)."""

from __future__ import annotations

from typing import Any

from wavepp.telemetry.ring import SpanRing


def fill(ring: SpanRing, n: int) -> None:
    with ring._lock:
        for _ in range(n):
            ring._seq += 1
            ring._spans.append((ring._seq, {"n": "s", "i": ring._seq}))


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
