"""MemoryStore hint index: per-stage counters, probe-based lookup, min over stages, clear."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from wavepp.store.base import HintResult
from wavepp.store.memory import MemoryStore

H = [101, 102, 103, 104, 105]


def _lookup(store: MemoryStore, prompts: list[list[int]], stages: list[int]) -> list[HintResult]:
    return asyncio.run(store.hint_lookup(prompts, stages))


def _update(store: MemoryStore, stage: int, attached: Sequence[int], detached: Sequence[int] = ()) -> None:
    asyncio.run(store.hint_update(stage, attached, detached))


def test_counter_keeps_block_resident_until_last_detach() -> None:
    """Two attaches need two detaches before a hash stops being resident (+1/-1 counters)."""
    store = MemoryStore()
    _update(store, 0, H[:2])
    _update(store, 0, H[:1])                 # H[0] attached twice (two owners)
    _update(store, 0, [], H[:1])
    assert _lookup(store, [H[:2]], [0])[0].per_stage == (2,)
    _update(store, 0, [], H[:1])
    assert _lookup(store, [H[:2]], [0])[0].per_stage == (0,)
    assert store.resident_count(0) == 1      # H[1] only


def test_detach_of_absent_hash_is_harmless() -> None:
    """Detaching a never-attached hash changes nothing and leaves no debt for a later attach."""
    store = MemoryStore()
    _update(store, 0, H[:2])
    _update(store, 0, [], [999, 998])
    assert store.resident_count(0) == 2
    res = _lookup(store, [H, [999]], [0])
    assert [r.per_stage for r in res] == [(2,), (0,)]
    _update(store, 0, [999])                 # no count of -1 was left behind
    assert store.resident_count(0) == 3
    assert _lookup(store, [[999]], [0])[0].per_stage == (1,)


def test_attach_then_detach_in_one_update() -> None:
    """One update applies attaches before detaches: attach+detach of the same hash nets to absent."""
    store = MemoryStore()
    _update(store, 0, [H[0]], [H[0]])
    assert store.resident_count(0) == 0


def test_stages_are_independent() -> None:
    """Residency on one stage says nothing about another."""
    store = MemoryStore()
    _update(store, 0, H)
    assert store.resident_count(0) == 5 and store.resident_count(1) == 0
    assert _lookup(store, [H], [0, 1])[0].per_stage == (5, 0)


def test_lookup_per_stage_and_reuse_is_min() -> None:
    """Each stage's longest resident prefix is reported; reuse_blocks is their minimum."""
    store = MemoryStore()
    _update(store, 0, H)           # 5 blocks
    _update(store, 1, H[:3])       # 3 blocks
    _update(store, 2, H[:4])       # 4 blocks
    other = [201, 202]
    _update(store, 1, other)
    res = _lookup(store, [H, H[:2], other, []], [0, 1, 2])
    assert [r.per_stage for r in res] == [(5, 3, 4), (2, 2, 2), (0, 2, 0), (0, 0, 0)]
    assert [r.reuse_blocks for r in res] == [3, 2, 0, 0]
    # a subset of stages
    assert _lookup(store, [H], [0, 2])[0].reuse_blocks == 4
    assert all(r.probes > 0 for r in res[:3]) and res[3].probes == 0


def test_other_prompts_blocks_do_not_extend_a_prefix() -> None:
    """Residents from another prompt leave this prompt's boundary at its first missing block."""
    store = MemoryStore()
    _update(store, 0, H[:2] + [301, 302, 303, 304])
    assert _lookup(store, [H], [0])[0].per_stage == (2,)


def test_hint_result_min_over_no_stages_is_zero() -> None:
    """HintResult with no stages reuses nothing."""
    assert HintResult((), 0).reuse_blocks == 0
    assert HintResult((4, 1, 7), 3).reuse_blocks == 1


def test_hint_clear_forgets_every_stage() -> None:
    """After hint_clear nothing is resident anywhere."""
    store = MemoryStore()
    _update(store, 0, H)
    _update(store, 3, H)
    asyncio.run(store.hint_clear())
    assert store.resident_count(0) == store.resident_count(3) == 0
    assert _lookup(store, [H], [0, 3])[0].per_stage == (0, 0)
    _update(store, 0, H[:1])                 # usable again afterwards
    assert _lookup(store, [H], [0])[0].per_stage == (1,)
