"""Longest resident prefix by exponential probe + binary search (DESIGN §2).

Residency on one stage is prefix-closed (a stage evicts leaves first), so "is ``hashes[i]``
resident?" is true for ``i < n`` and false from ``n`` on. Probing indices 0, 1, 3, 7, ... finds
a bracket in O(log n) probes, then binary search finds ``n`` in O(log n) more - instead of a
walk over every block of a 100k-token prompt.
"""

from __future__ import annotations

from collections.abc import Callable, Container, Sequence


def longest_prefix(hashes: Sequence[int], resident: Callable[[int], bool], end: int | None = None,
                   guess: int = 0) -> int:
    """``n`` such that ``hashes[:n]`` are resident and ``hashes[n]`` is not (or ``n == end``).

    Only ``hashes[:end]`` are considered (default: all). ``guess`` (> 0): a likely answer - another
    stage's, as stages mostly agree - confirmed in two probes (``hashes[guess-1]`` resident,
    ``hashes[guess]`` not); when it is wrong the search goes on above or below it, so the answer
    is exact whatever the guess.
    """
    m = len(hashes) if end is None else min(end, len(hashes))
    lo = 0                     # once past the first probe, invariant: hashes[lo] resident
    if 0 < guess <= m:
        if not resident(hashes[guess - 1]):
            m = guess - 1      # the answer lies below the guess
        elif guess == m or not resident(hashes[guess]):
            return guess
        else:
            lo = guess         # the answer lies above it
    if lo == 0 and (m == 0 or not resident(hashes[0])):
        return 0
    step = 1
    while True:
        hi = lo + step
        if hi >= m:
            hi = m             # treat index m as "not resident"
            break
        if not resident(hashes[hi]):
            break
        lo, step = hi, step * 2
    # hashes[lo] resident, hashes[hi] not (or hi == m): answer is in (lo, hi]
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if resident(hashes[mid]):
            lo = mid
        else:
            hi = mid
    return lo + 1


def longest_prefix_linear(hashes: Sequence[int], resident: Callable[[int], bool]) -> int:
    """The reference: walk until the first miss (tests compare the two)."""
    for i, h in enumerate(hashes):
        if not resident(h):
            return i
    return len(hashes)


def longest_prefix_in(hashes: Sequence[int], resident: Container[int], end: int | None = None,
                      guess: int = 0) -> tuple[int, int]:
    """:func:`longest_prefix` for a plain container (``h in resident``), without a callback per
    probe - the hot path of the memory store and of a stage's lease. Returns (length, probes)."""
    m = len(hashes) if end is None else min(end, len(hashes))
    probes, lo = 0, 0
    if 0 < guess <= m:
        probes += 1
        if hashes[guess - 1] not in resident:
            m = guess - 1
        elif guess == m:
            return guess, probes
        else:
            probes += 1
            if hashes[guess] not in resident:
                return guess, probes
            lo = guess
    if lo == 0:
        if m == 0:
            return 0, probes
        probes += 1
        if hashes[0] not in resident:
            return 0, probes
    step = 1
    while True:
        hi = lo + step
        if hi >= m:
            hi = m
            break
        probes += 1
        if hashes[hi] not in resident:
            break
        lo, step = hi, step * 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        probes += 1
        if hashes[mid] in resident:
            lo = mid
        else:
            hi = mid
    return lo + 1, probes
