"""The ``Store`` contract (store/base.py), run against MemoryStore and RedisStore alike.

Every test takes ``store_factory`` (params memory, redis) and asserts the same outcome for both;
a cross-check replays one random operation sequence on both stores and compares every result;
the last tests drive several Redis clients at once (no lost knob write, no lost hint event).
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Sequence
from typing import Any

import pytest

from wavepp.runtime.control.knobs import POLICY_NAMES, Deployment, KnobError, Knobs, validated_values
from wavepp.store.base import RUN_META_CAP, HintResult, KnobsRecord, RegistryEntry, StoreError
from wavepp.store.memory import MemoryStore
from wavepp.store.probe import longest_prefix, longest_prefix_linear
from wavepp.store.records import PlannedChunk, WavePlanRecord
from wavepp.store.redis_store import RedisStore

H = [101, 102, 103, 104, 105]
TOP = 2**64 - 1
LONG_TTL_S = 60.0


def entry(request_id: str, holder: str, stages: tuple[int, ...] = (0, 1), reuse: int = 4,
          escrow: int = 2) -> RegistryEntry:
    return RegistryEntry(request_id, holder, stages, reuse, escrow)


def by_id(entries: Sequence[RegistryEntry]) -> list[RegistryEntry]:
    """The contract does not order registry entries; compare them sorted."""
    return sorted(entries, key=lambda e: e.request_id)


class Counted:
    """A resident set that counts membership probes (what the store reports as ``probes``)."""

    def __init__(self, resident: set[int]) -> None:
        self.resident = resident
        self.probes = 0

    def __call__(self, h: int) -> bool:
        self.probes += 1
        return h in self.resident


def expected_lookup(prompts: Sequence[Sequence[int]], stages: Sequence[int],
                    resident: dict[int, set[int]]) -> list[HintResult]:
    """The lookup computed directly with ``store.probe.longest_prefix``, each stage guessing the one before's answer."""
    out = []
    for hashes in prompts:
        probes, per_stage, n = 0, [], 0
        for s in stages:                 # each stage's search starts at the one before's answer
            counted = Counted(resident.get(s, set()))
            n = longest_prefix(hashes, counted, guess=n)
            per_stage.append(n)
            probes += counted.probes
        out.append(HintResult(tuple(per_stage), probes))
    return out


# ---- hint index -------------------------------------------------------------------------------

def test_attach_makes_a_prefix_resident(store_factory: Any) -> None:
    """Attached hashes are counted on their stage and found as the prompt's resident prefix."""
    async def body() -> None:
        store = await store_factory()
        await store.hint_update(0, H[:3], [])
        assert await store.hint_count(0) == 3
        (res,) = await store.hint_lookup([H], [0])
        assert res.per_stage == (3,) and res.reuse_blocks == 3
    store_factory.run(body)


def test_detach_of_absent_hash_is_harmless(store_factory: Any) -> None:
    """Detaching a never-attached hash changes nothing and leaves no negative count behind."""
    async def body() -> None:
        store = await store_factory()
        await store.hint_update(0, H[:2], [])
        await store.hint_update(0, [], [999, 998])
        assert await store.hint_count(0) == 2
        res = await store.hint_lookup([H, [999]], [0])
        assert [r.per_stage for r in res] == [(2,), (0,)]
        await store.hint_update(0, [999], [])                # one attach makes it resident again
        assert await store.hint_count(0) == 3
        assert (await store.hint_lookup([[999]], [0]))[0].per_stage == (1,)
    store_factory.run(body)


def test_counts_are_per_stage(store_factory: Any) -> None:
    """Residency and counts on one stage say nothing about another."""
    async def body() -> None:
        store = await store_factory()
        await store.hint_update(0, H, [])
        await store.hint_update(2, H[:2], [])
        assert [await store.hint_count(s) for s in (0, 1, 2)] == [5, 0, 2]
        (res,) = await store.hint_lookup([H], [0, 1, 2])
        assert res.per_stage == (5, 0, 2) and res.reuse_blocks == 0
        await store.hint_update(2, [], H)                    # detach on stage 2 leaves stage 0 alone
        assert [await store.hint_count(s) for s in (0, 2)] == [5, 0]
    store_factory.run(body)


def test_multiple_attach_then_one_detach_keeps_hash_resident(store_factory: Any) -> None:
    """A hash attached n times (several owners) stays resident until its n-th detach."""
    async def body() -> None:
        store = await store_factory()
        await store.hint_update(0, [H[0], H[0]], [])         # twice in one update
        await store.hint_update(0, [H[0], H[1]], [])         # and once more
        await store.hint_update(0, [], [H[0]])
        assert (await store.hint_lookup([H], [0]))[0].per_stage == (2,)
        await store.hint_update(0, [], [H[0], H[0]])
        assert (await store.hint_lookup([H], [0]))[0].per_stage == (0,)
        assert await store.hint_count(0) == 1                # H[1] only
        await store.hint_update(0, [H[2]], [H[2]])           # attaches apply before detaches: nets to absent
        assert await store.hint_count(0) == 1
    store_factory.run(body)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_lookup_equals_direct_probe_computation(store_factory: Any, seed: int) -> None:
    """Over random prefix-closed residency on several stages, lookups give exactly the HintResult
    (per-stage lengths and probe counts) of ``longest_prefix`` run on the same residency."""
    rng = random.Random(seed)
    stages = [0, 1, 2, 5]
    prompts = [[rng.getrandbits(64) for _ in range(rng.randint(1, 300))] for _ in range(6)]
    prompts.append(prompts[0][:40] + [rng.getrandbits(64) for _ in range(30)])       # shares a prefix
    resident: dict[int, set[int]] = {s: set() for s in stages}
    updates = []
    for s in stages:
        for p in prompts:
            n = rng.choice([0, len(p), rng.randint(0, len(p))])
            updates.append((s, p[:n]))
            resident[s].update(p[:n])
    queries = prompts + [p[:rng.randint(0, len(p))] for p in prompts] + [[rng.getrandbits(64)]]
    expected = expected_lookup(queries, stages, resident)
    for q, res in zip(queries, expected, strict=True):       # the direct computation is itself right
        assert res.per_stage == tuple(longest_prefix_linear(q, resident[s].__contains__) for s in stages)

    async def body() -> None:
        store = await store_factory()
        for s, attached in updates:
            await store.hint_update(s, attached, [])
        assert await store.hint_lookup(queries, stages) == expected
        assert await store.hint_lookup(queries, stages[::-1]) == expected_lookup(queries, stages[::-1], resident)
        for s in stages:
            assert await store.hint_count(s) == len(resident[s])
    store_factory.run(body)


def test_empty_prompt_list_and_empty_prompt(store_factory: Any) -> None:
    """No prompts: no results. An empty prompt, or no stages: nothing reused, no probes."""
    async def body() -> None:
        store = await store_factory()
        await store.hint_update(0, H, [])
        assert await store.hint_lookup([], [0, 1]) == []
        assert await store.hint_lookup([[]], [0, 1]) == [HintResult((0, 0), 0)]
        assert await store.hint_lookup([H, []], []) == [HintResult((), 0), HintResult((), 0)]
        full = expected_lookup([H], [0], {0: set(H)})[0]
        assert await store.hint_lookup([[], H], [0]) == [HintResult((0,), 0), full]
        assert full.per_stage == (5,)
    store_factory.run(body)


def test_hashes_near_two_to_the_64_survive_packing(store_factory: Any) -> None:
    """Full-width unsigned 64-bit hashes (packed as 8-byte words on Redis) stay distinct and exact."""
    big = [TOP, TOP - 1, 2**63, 2**63 - 1, TOP - 255, 0, 1, 1 << 56, 2 << 56]   # last two differ in the top byte
    async def body() -> None:
        store = await store_factory()
        await store.hint_update(3, big, [])
        assert await store.hint_count(3) == len(big)
        assert (await store.hint_lookup([big], [3]))[0].per_stage == (len(big),)
        await store.hint_update(3, [], [1 << 56])
        res = await store.hint_lookup([big, [2 << 56], [TOP - 2]], [3])
        assert [r.per_stage for r in res] == [(len(big) - 2,), (1,), (0,)]
        await store.hint_update(3, [], [TOP])
        assert (await store.hint_lookup([big], [3]))[0].per_stage == (0,)
        assert await store.hint_count(3) == len(big) - 2
    store_factory.run(body)


def test_hint_update_many_equals_updates_in_order(store_factory: Any) -> None:
    """One batch applies its stages' events in order, as the same single updates would."""
    batch = [(0, H, []), (1, H[:2], []), (0, [], H[3:]), (1, [H[0]], [H[0], H[1]]), (4, [], [7])]
    async def body() -> None:
        batched, single = await store_factory(), await store_factory()
        await batched.hint_update_many(batch)
        await batched.hint_update_many([])
        for s, a, d in batch:
            await single.hint_update(s, a, d)
        for store in (batched, single):
            assert [await store.hint_count(s) for s in (0, 1, 4)] == [3, 1, 0]
        prompts = [H, [H[1]], [7]]
        assert await batched.hint_lookup(prompts, [0, 1, 4]) == await single.hint_lookup(prompts, [0, 1, 4])
        assert [r.per_stage for r in await batched.hint_lookup(prompts, [0, 1, 4])] == [
            (3, 1, 0), (1, 0, 0), (0, 0, 0)]
    store_factory.run(body)


def test_hint_clear_forgets_every_stage(store_factory: Any) -> None:
    """After hint_clear nothing is resident anywhere; the index is usable again."""
    async def body() -> None:
        store = await store_factory()
        await store.hint_update_many([(0, H, []), (3, H, [])])
        await store.hint_clear()
        assert [await store.hint_count(s) for s in (0, 3)] == [0, 0]
        assert (await store.hint_lookup([H], [0, 3]))[0].per_stage == (0, 0)
        await store.hint_update(0, H[:1], [])
        assert (await store.hint_lookup([H], [0, 3]))[0].per_stage == (1, 0)
    store_factory.run(body)


# ---- lease/escrow registry --------------------------------------------------------------------

def test_registry_put_and_entries(store_factory: Any) -> None:
    """Entries come back whole (stages, reuse, escrow); putting a request again replaces it."""
    a1, a2, b1 = entry("r1", "A", (0, 1, 2), 7, 3), entry("r2", "A", (), 0, 0), entry("r3", "B", (3,), 1, 9)
    async def body() -> None:
        store = await store_factory()
        assert await store.registry_entries() == []
        await store.registry_put([], LONG_TTL_S)
        await store.registry_put([a1, a2], LONG_TTL_S)
        await store.registry_put([b1], LONG_TTL_S)
        assert by_id(await store.registry_entries()) == [a1, a2, b1]
        a1b = entry("r1", "A", (5,), 11, 12)
        await store.registry_put([a1b], LONG_TTL_S)
        assert by_id(await store.registry_entries()) == [a1b, a2, b1]
        assert await store.registry_reap() == []             # every holder alive
    store_factory.run(body)


def test_registry_drop_by_holder(store_factory: Any) -> None:
    """The holder drops its own entries; unknown ids are harmless."""
    async def body() -> None:
        store = await store_factory()
        await store.registry_put([entry("r1", "A"), entry("r2", "A")], LONG_TTL_S)
        await store.registry_put([entry("r3", "B")], LONG_TTL_S)
        await store.registry_drop("A", ["r1", "nope"])
        await store.registry_drop("A", [])
        assert [e.request_id for e in by_id(await store.registry_entries())] == ["r2", "r3"]
    store_factory.run(body)


def test_registry_drop_by_other_holder_changes_nothing(store_factory: Any) -> None:
    """Only the holder that put an entry can drop it (a stale leader must not release a new one's pins)."""
    async def body() -> None:
        store = await store_factory()
        await store.registry_put([entry("r1", "A")], LONG_TTL_S)
        await store.registry_drop("B", ["r1"])
        assert await store.registry_entries() == [entry("r1", "A")]
    store_factory.run(body)


def test_registry_refresh_and_reap_of_an_expired_holder(store_factory: Any) -> None:
    """A refreshed holder outlives its first TTL; once it stops, reap returns and removes its entries
    (once), leaving a live holder's entries alone. Real sleeps inside one loop (MemoryStore's TTL
    clock is the running loop's time)."""
    ttl = 0.2
    a = [entry("a1", "A", (0,), 1, 1), entry("a2", "A", (1, 2), 2, 0)]
    b = [entry("b1", "B")]
    async def body() -> None:
        store = await store_factory()
        await store.registry_put(a, ttl)
        await store.registry_put(b, LONG_TTL_S)
        await asyncio.sleep(0.12)
        await store.registry_refresh("A", ttl)               # deadline now ~0.32 s
        await asyncio.sleep(0.12)                            # past the first deadline (0.2 s)
        assert by_id(await store.registry_entries()) == a + b
        assert await store.registry_reap() == []
        await asyncio.sleep(0.3)                             # past the refreshed deadline
        assert await store.registry_entries() == b
        assert by_id(await store.registry_reap()) == a
        assert await store.registry_reap() == []
        await store.registry_refresh("A", ttl)               # a late heartbeat revives nothing
        assert await store.registry_entries() == b
    store_factory.run(body)


# ---- wave plans -------------------------------------------------------------------------------

def test_plans_publish_retire_recent_in_flight(store_factory: Any) -> None:
    """Recent plans in publish order (oldest first); in-flight ones by numeric wave id until retired."""
    plans = [WavePlanRecord(w, 512, 0.25 * w, "wavepp", (PlannedChunk(f"q{w}", 0, 64 * w, w, w == 3),))
             for w in (5, 10, 2, 3)]
    async def body() -> None:
        store = await store_factory()
        assert await store.plans_recent(5) == [] and await store.plans_in_flight() == []
        for p in plans:
            await store.plan_publish(p)
        assert await store.plans_recent(2) == plans[-2:]
        assert await store.plans_recent(100) == plans
        assert await store.plans_recent(0) == []
        assert [p.wave for p in await store.plans_in_flight()] == [2, 3, 5, 10]
        await store.plan_retire(3)
        await store.plan_retire(99)                          # unknown wave: harmless
        assert await store.plans_in_flight() == [plans[2], plans[0], plans[1]]
        assert await store.plans_recent(100) == plans        # the log keeps retired plans
    store_factory.run(body)


# ---- knobs ------------------------------------------------------------------------------------

def test_knobs_at_version_zero_hold_no_values_and_the_reader_supplies_the_defaults(store_factory: Any) -> None:
    """The store knows no knob: a record never written is empty, and its reader brings the defaults."""
    async def body() -> None:
        store = await store_factory()
        record = await store.knobs_get()
        assert record == KnobsRecord(0, {})
        assert record.values_or(Knobs().as_dict()) == Knobs().as_dict()
        assert await store.knobs_history(10) == []
        written = await store.knobs_set({"ring": 2}, validate=validated_values)
        assert written.values_or({}) == written.values == {**Knobs().as_dict(), "ring": 2}   # stored: as written
    store_factory.run(body)


def test_clear_all_can_keep_the_knobs(store_factory: Any) -> None:
    """A bench on a live deployment's store clears the run state but keeps the operator's knobs."""
    async def body() -> None:
        store = await store_factory()
        await store.hint_update(0, H, [])
        await store.plan_publish(WavePlanRecord(1))
        written = await store.knobs_set({"ring": 2}, validate=validated_values)
        assert await store.clear_all(keep_knobs=True) > 0
        assert await store.hint_count(0) == 0 and await store.plans_recent(10) == []
        assert await store.knobs_get() == written
        assert [h["changes"] for h in await store.knobs_history(10)] == [{"ring": 2}]
    store_factory.run(body)


def test_knobs_set_increments_version_and_merges(store_factory: Any) -> None:
    async def body() -> None:
        store = await store_factory()
        first = await store.knobs_set({"max_leases": 10}, validate=validated_values)
        assert first == KnobsRecord(1, {**Knobs().as_dict(), "max_leases": 10})
        second = await store.knobs_set({"ring": 8, "policy": "trtllm-pp"}, validate=validated_values)
        assert second == KnobsRecord(2, {**Knobs().as_dict(), "max_leases": 10, "ring": 8, "policy": "trtllm-pp"})
        assert await store.knobs_get() == second
        assert (await store.knobs_set({}, validate=validated_values)).version == 3   # an empty write is still a write
    store_factory.run(body)


BAD_CHANGES = {
    "string-for-int": {"max_leases": "10"},
    "int-for-bool": {"hysteresis": 1},
    "bool-for-int": {"ring": True},
    "float-for-int": {"ring": 1.5},
    "below-range": {"fill_factor": 0},
    "above-range": {"max_wave_tokens": 1 << 23},
    "unknown-name": {"no_such_knob": 1},
    "min-above-max": {"min_wave_tokens": 32768},
    "max-below-min": {"max_wave_tokens": 4096},
    "bad-policy": {"policy": "fifo"},
    "bad-planner": {"planner": "greedy"},
    "good-and-bad": {"max_leases": 5, "policy": "fifo"},
    "negative-ring": {"ring": -4},
}


@pytest.mark.parametrize("changes", list(BAD_CHANGES.values()), ids=list(BAD_CHANGES))
def test_invalid_knob_write_changes_nothing(store_factory: Any, changes: dict[str, Any]) -> None:
    """A bad value raises KnobError; version, values and history stay as they were."""
    async def body() -> None:
        store = await store_factory()
        before = await store.knobs_set({"max_leases": 77}, validate=validated_values)
        with pytest.raises(KnobError):
            await store.knobs_set(changes, validate=validated_values)
        assert await store.knobs_get() == before
        assert [h["version"] for h in await store.knobs_history(10)] == [1]
    store_factory.run(body)


def test_knob_write_names_every_bad_field_and_blames_the_changed_one(store_factory: Any) -> None:
    """One KnobError lists each bad value; of an inconsistent pair the field the writer set is named."""
    async def body() -> None:
        store = await store_factory()
        with pytest.raises(KnobError) as info:
            await store.knobs_set({"ring": -4, "max_leases": "10", "fill_factor": 3}, validate=validated_values)
        assert set(info.value.problems) == {"ring", "max_leases"}
        with pytest.raises(KnobError) as info:
            await store.knobs_set({"max_wave_tokens": 1000}, validate=validated_values)   # below the stored b_min 8192
        assert list(info.value.problems) == ["max_wave_tokens"]
        assert (await store.knobs_get()).version == 0
    store_factory.run(body)


@pytest.mark.parametrize("changes, field", [
    ({"max_wave_tokens": 8200}, "max_wave_tokens"),
    ({"min_wave_tokens": 1040}, "min_wave_tokens"),
    ({"static_chunk_tokens": 100}, "static_chunk_tokens"),
    ({"max_wave_tokens": 1000}, "max_wave_tokens"),
])
def test_knob_writes_are_checked_against_the_deployment(store_factory: Any, changes: dict[str, Any],
                                                        field: str) -> None:
    """With a deployment record (what the runtime publishes), a budget that is not a whole number of
    its blocks is refused, naming the knob and the block size; nothing is written."""
    async def body() -> None:
        store = await store_factory()
        await store.deployment_put(Deployment(block_size=64, num_stages=4))
        before = await store.knobs_get()
        assert before.deployment == Deployment(64, 4)
        with pytest.raises(KnobError) as info:
            await store.knobs_set(changes, validate=validated_values)
        assert list(info.value.problems) == [field]
        assert "block size 64" in info.value.problems[field]
        assert await store.knobs_get() == before
        assert await store.knobs_history(10) == []
        written = await store.knobs_set({"max_wave_tokens": 8256}, validate=validated_values)  # whole blocks
        assert written.version == 1 and written.deployment == Deployment(64, 4)
        await store.deployment_put(Deployment(block_size=128, num_stages=2))
        with pytest.raises(KnobError) as info:                           # the stored 8256 no longer fits
            await store.knobs_set({"ring": 4}, validate=validated_values)
        assert list(info.value.problems) == ["max_wave_tokens"]
    store_factory.run(body)


def test_knobs_expected_version(store_factory: Any) -> None:
    """A write that names a stale version raises StoreError (not KnobError) and writes nothing."""
    async def body() -> None:
        store = await store_factory()
        assert (await store.knobs_set({"ring": 4}, expected_version=0, validate=validated_values)).version == 1
        with pytest.raises(StoreError) as info:
            await store.knobs_set({"ring": 6}, expected_version=0, validate=validated_values)
        assert not isinstance(info.value, KnobError)
        assert await store.knobs_get() == KnobsRecord(1, {**Knobs().as_dict(), "ring": 4})
        assert (await store.knobs_set({"ring": 6}, expected_version=1, validate=validated_values)).version == 2
        assert (await store.knobs_get()).values["ring"] == 6
    store_factory.run(body)


def test_a_knob_write_with_a_min_version_takes_it_where_it_is_higher(store_factory: Any) -> None:
    """A runtime writing back a record the store lost keeps its version; a write never goes backwards."""
    async def body() -> None:
        store = await store_factory()
        assert (await store.knobs_set({"ring": 4}, validate=validated_values, min_version=6)).version == 6
        assert (await store.knobs_set({"ring": 5}, validate=validated_values, min_version=3)).version == 7
        assert [h["version"] for h in await store.knobs_history(5)] == [6, 7]
    store_factory.run(body)


def test_knob_history_records_each_write_in_order(store_factory: Any) -> None:
    writes = [{"max_leases": 10}, {"ring": 8, "hysteresis": False}, {"policy": POLICY_NAMES[1]}]
    async def body() -> None:
        store = await store_factory()
        start = time.time()
        for w in writes:
            await store.knobs_set(w, validate=validated_values)
        with pytest.raises(KnobError):
            await store.knobs_set({"ring": -1}, validate=validated_values)   # not recorded
        end = time.time()
        history = await store.knobs_history(10)
        assert [(h["version"], h["changes"]) for h in history] == [(1, writes[0]), (2, writes[1]), (3, writes[2])]
        assert all(start - 1 <= h["time"] <= end + 1 for h in history)
        assert await store.knobs_history(2) == history[-2:]
        assert await store.knobs_history(0) == []
    store_factory.run(body)


async def _sleep_until_second_fraction(lo: float, hi: float) -> None:
    while not lo <= time.time() % 1 <= hi:
        await asyncio.sleep(((lo + hi) / 2 - time.time() % 1) % 1)


def test_knob_history_time_is_the_write_time(store_factory: Any) -> None:
    """The recorded time is the wall time of the write, also early in a second (µs < 100000)."""
    async def body() -> None:
        store = await store_factory()
        await _sleep_until_second_fraction(0.03, 0.07)
        before = time.time()
        await store.knobs_set({"max_leases": 3}, validate=validated_values)
        after = time.time()
        (h,) = await store.knobs_history(1)
        assert before - 0.02 <= h["time"] <= after + 0.02, (before, h["time"], after)
    store_factory.run(body)


# ---- run descriptions -------------------------------------------------------------------------

DESCRIPTION = {"engine": "sim", "model": "llama-3-8b", "pp": 2, "capacities": [100, 90], "concurrency": 8,
               "sim": {"model": "llama-3-8b", "hardware": "h200", "gpus_per_stage": None, "time_scale": 3.0},
               "mechanisms": ("ring", "fill"), "run": {"id": "20261130T093000Z-1a2b3c", "started": 1.5}}


def test_a_run_description_reads_back_as_json_wrote_it(store_factory: Any) -> None:
    """Both stores give back the JSON shape (a tuple comes back a list), per run id; an unknown id is None."""
    async def body() -> None:
        store = await store_factory()
        assert await store.run_meta_get("20261130T093000Z-1a2b3c") is None
        await store.run_meta_put("20261130T093000Z-1a2b3c", DESCRIPTION)
        await store.run_meta_put("20261130T093001Z-000000", {"engine": "torch", "model": "tiny-llama"})
        assert await store.run_meta_get("20261130T093000Z-1a2b3c") == DESCRIPTION | {"mechanisms": ["ring", "fill"]}
        assert await store.run_meta_get("20261130T093001Z-000000") == {"engine": "torch", "model": "tiny-llama"}
        assert await store.run_meta_get("20261130T093002Z-000000") is None
        await store.run_meta_put("20261130T093001Z-000000", {"engine": "sim"})     # the run's own record: replaced
        assert await store.run_meta_get("20261130T093001Z-000000") == {"engine": "sim"}
    store_factory.run(body)


def test_only_the_newest_run_descriptions_are_kept(store_factory: Any) -> None:
    """Published in any order, the RUN_META_CAP newest run ids (ids start with the start time) stay."""
    async def body() -> None:
        store = await store_factory()
        ids = [f"20261130T09{m:02d}{s:02d}Z-abcdef" for m in range(2) for s in range(0, 60)][:RUN_META_CAP + 3]
        for run_id in random.Random(5).sample(ids, len(ids)):
            await store.run_meta_put(run_id, {"id": run_id})
        kept = [run_id for run_id in ids if await store.run_meta_get(run_id) is not None]
        assert kept == ids[3:]
        assert await store.run_meta_get(ids[-1]) == {"id": ids[-1]}
    store_factory.run(body)


@pytest.mark.parametrize("keep_knobs", [False, True])
def test_run_descriptions_survive_clear_all(store_factory: Any, keep_knobs: bool) -> None:
    """A bench clears the run state before each run; the runs before it stay described (a viewer
    still shows their spans)."""
    async def body() -> None:
        store = await store_factory()
        await store.run_meta_put("20261130T093000Z-1a2b3c", {"engine": "sim"})
        await store.plan_publish(WavePlanRecord(1))
        assert await store.clear_all(keep_knobs=keep_knobs) > 0
        assert await store.plans_recent(10) == []
        assert await store.run_meta_get("20261130T093000Z-1a2b3c") == {"engine": "sim"}
    store_factory.run(body)


# ---- the autopilot's settings -------------------------------------------------------------------

@pytest.mark.parametrize("keep_knobs", [False, True])
def test_the_autopilot_settings_read_back_whole_and_stay_with_the_knobs(store_factory: Any, keep_knobs: bool) -> None:
    """Written whole, read back as JSON wrote them; clear_all keeps them exactly when it keeps the knobs
    (they are the operator's, like the knobs)."""
    async def body() -> None:
        store = await store_factory()
        assert await store.autopilot_get() is None
        record = {"mode": "on", "bounds": {"ring": (4, 16)}, "frozen": False}
        await store.autopilot_put(record)
        await store.autopilot_put(record | {"frozen": True})
        assert await store.autopilot_get() == {"mode": "on", "bounds": {"ring": [4, 16]}, "frozen": True}
        await store.clear_all(keep_knobs=keep_knobs)
        assert (await store.autopilot_get() is not None) == keep_knobs
    store_factory.run(body)


# ---- clear_all --------------------------------------------------------------------------------

def test_clear_all_forgets_everything(store_factory: Any) -> None:
    async def body() -> None:
        store, other = await store_factory(), await store_factory()
        for s in (store, other):
            await s.hint_update(0, H, [])
            await s.registry_put([entry("r1", "A")], LONG_TTL_S)
            await s.plan_publish(WavePlanRecord(1))
            await s.knobs_set({"ring": 2}, validate=validated_values)
        assert await store.clear_all() > 0
        assert await store.hint_count(0) == 0
        assert (await store.hint_lookup([H], [0]))[0].per_stage == (0,)
        assert await store.registry_entries() == [] and await store.registry_reap() == []
        assert await store.plans_recent(10) == [] and await store.plans_in_flight() == []
        assert await store.knobs_get() == KnobsRecord(0, {})
        assert await store.knobs_history(10) == []
        # another deployment (Redis: another cluster in the same database) is untouched
        assert await other.hint_count(0) == 5
        assert await other.registry_entries() == [entry("r1", "A")]
        assert await other.plans_in_flight() == [WavePlanRecord(1)]
        assert (await other.knobs_get()).version == 1
        await store.hint_update(1, H[:1], [])                # usable after clearing
        assert await store.hint_count(1) == 1
    store_factory.run(body)


# ---- cross-check: one random operation sequence on both stores --------------------------------

VALID_KNOBS = [lambda r: {"max_leases": r.randint(1, 2000)}, lambda r: {"ring": r.randint(0, 16)},
               lambda r: {"hysteresis": r.random() < 0.5}, lambda r: {"policy": r.choice(POLICY_NAMES)},
               lambda r: {"planner": r.choice(["auto", "mpu", "static"])},
               lambda r: {"min_wave_tokens": r.choice([4096, 8192, 16384, 32768])},
               lambda r: {"max_wave_tokens": r.choice([4096, 16384, 65536])}]
INVALID_KNOBS = [lambda r: {"ring": "x"}, lambda r: {"nope": 1}, lambda r: {"fill_factor": 0}]


def _normalize(op: str, result: Any) -> Any:
    if op in ("registry_entries", "registry_reap"):
        return by_id(result)
    if op == "knobs_history":
        return [(h["version"], h["changes"]) for h in result]
    return result


async def _call(store: Any, op: str, args: tuple[Any, ...]) -> Any:
    kwargs = {"validate": validated_values} if op == "knobs_set" else {}
    try:
        return ("ok", _normalize(op, await getattr(store, op)(*args, **kwargs)))
    except (KnobError, StoreError) as exc:
        return ("raised", type(exc).__name__)


async def _random_op(rng: random.Random, memory: MemoryStore, prompts: list[list[int]],
                     universe: list[int]) -> tuple[str, tuple[Any, ...]]:
    def event() -> tuple[int, list[int], list[int]]:
        p = rng.choice(prompts)
        return rng.randrange(4), p[:rng.randint(0, len(p))], rng.sample(universe, rng.randint(0, 4))

    kind = rng.randrange(17)
    if kind <= 2:
        return "hint_update", event()
    if kind == 3:
        return "hint_update_many", ([event() for _ in range(rng.randint(0, 3))],)
    if kind <= 5:
        query = [p[:rng.randint(0, len(p))] for p in rng.sample(prompts, rng.randint(0, 3))]
        return "hint_lookup", (query, rng.sample(range(5), rng.randint(0, 4)))
    if kind == 6:
        return "hint_count", (rng.randrange(5),)
    if kind == 7:
        holder = rng.choice("ABC")
        entries = [entry(f"r{rng.randrange(10)}", holder, tuple(rng.sample(range(4), rng.randint(0, 3))),
                         rng.randrange(100), rng.randrange(100)) for _ in range(rng.randint(0, 3))]
        return "registry_put", (list({e.request_id: e for e in entries}.values()), LONG_TTL_S)
    if kind == 8:
        holder = rng.choice("ABC")
        owned = [e.request_id for e in await memory.registry_entries() if e.holder == holder]
        return "registry_drop", (holder, rng.sample(owned, rng.randint(0, len(owned))) + ["unknown"])
    if kind == 9:
        return rng.choice(["registry_entries", "registry_reap"]), ()
    if kind == 10:
        w = rng.randrange(12)
        return "plan_publish", (WavePlanRecord(w, chunks=(PlannedChunk(f"r{w}", 0, rng.randrange(1000), 0, True),)),)
    if kind == 11:
        return "plan_retire", (rng.randrange(12),)
    if kind == 12:
        return rng.choice([("plans_recent", (rng.randrange(6),)), ("plans_in_flight", ())])
    if kind <= 14:
        changes = rng.choice(VALID_KNOBS if rng.random() < 0.8 else INVALID_KNOBS)(rng)
        version = (await memory.knobs_get()).version
        expected = rng.choice([None, None, None, version, version - 1, version + 1])
        return "knobs_set", (changes, expected)
    if kind == 15:
        return rng.choice([("knobs_get", ()), ("knobs_history", (rng.randrange(5),))])
    return rng.choice([("hint_clear", ()), ("hint_clear", ()), ("clear_all", ())])


@pytest.mark.parametrize("seed", [11, 12])
def test_random_operation_sequence_gives_identical_results(redis_store_url: str, seed: int) -> None:
    """Every result of 400 random operations is the same on MemoryStore and RedisStore."""
    rng = random.Random(seed)
    universe = [rng.getrandbits(64) for _ in range(40)] + [TOP, TOP - 1, 0]
    prompts = [rng.sample(universe, rng.randint(0, 12)) for _ in range(6)]

    async def body() -> None:
        memory, redis_store = MemoryStore(), await RedisStore.connect(redis_store_url)
        try:
            for step in range(400):
                op, args = await _random_op(rng, memory, prompts, universe)
                got = [await _call(s, op, args) for s in (memory, redis_store)]
                if op == "clear_all":                        # the count of deleted things is per store
                    continue
                assert got[0] == got[1], f"step {step}: {op}{args}"
            for s in range(5):
                assert await memory.hint_count(s) == await redis_store.hint_count(s)
            assert _normalize("registry_entries", await redis_store.registry_entries()) == \
                _normalize("registry_entries", await memory.registry_entries())
        finally:
            await redis_store.clear_all()
            await redis_store.close()
    asyncio.run(body())


# ---- several Redis clients at once ------------------------------------------------------------

async def _clients(url: str, n: int) -> list[RedisStore]:
    return [await RedisStore.connect(url) for _ in range(n)]


def test_concurrent_knob_writes_lose_nothing(redis_store_url: str) -> None:
    """Interleaved knobs_set from separate connections: every write lands, in one version order."""
    num_clients, per_client = 5, 8

    async def writer(store: RedisStore, c: int) -> list[int]:
        return [(await store.knobs_set({"max_round_requests": 100 * c + i + 1}, validate=validated_values)).version
                for i in range(per_client)]

    async def body() -> None:
        stores = await _clients(redis_store_url, num_clients)
        try:
            versions = await asyncio.gather(*(writer(s, c) for c, s in enumerate(stores)))
            total = num_clients * per_client
            assert sorted(v for vs in versions for v in vs) == list(range(1, total + 1))
            assert all(vs == sorted(vs) for vs in versions)
            assert sum(s.round_trips for s in stores) > 2 * total, "no write ever conflicted: nothing tested"
            record = await stores[0].knobs_get()
            history = await stores[0].knobs_history(1000)
            assert record.version == total
            assert [h["version"] for h in history] == list(range(1, total + 1))
            written = [h["changes"]["max_round_requests"] for h in history]
            assert sorted(written) == sorted(100 * c + i + 1 for c in range(num_clients) for i in range(per_client))
            for c in range(num_clients):                     # each client's writes land in its own order
                mine = [w for w in written if w // 100 == c]
                assert mine == sorted(mine)
            assert record.values["max_round_requests"] == written[-1]
        finally:
            for s in stores:
                await s.close()
    asyncio.run(body())


def test_concurrent_hint_updates_match_memory_store(redis_store_url: str) -> None:
    """Clients on different stages (and all on one shared stage) update at once; the index then
    answers exactly as a MemoryStore fed the same events."""
    rng = random.Random(7)
    prompts = [[rng.getrandbits(64) for _ in range(rng.randint(1, 80))] for _ in range(5)]
    num_clients, shared_stage = 4, 9
    events: list[list[tuple[list[int], list[int]]]] = []
    for _ in range(num_clients):
        mine = []
        for _ in range(30):
            p = rng.choice(prompts)
            n = rng.randint(0, len(p))
            mine.append((p[:n], p[rng.randint(0, n):n] if rng.random() < 0.4 else []))
        events.append(mine)

    async def client_run(store: RedisStore, stage: int) -> None:
        for attached, detached in events[stage]:
            await store.hint_update(stage, attached, detached)
            await store.hint_update(shared_stage, prompts[0][:10], [])

    async def body() -> None:
        stores = await _clients(redis_store_url, num_clients)
        memory = MemoryStore()
        try:
            await asyncio.gather(*(client_run(s, stage) for stage, s in enumerate(stores)))
            for stage in range(num_clients):
                for attached, detached in events[stage]:
                    await memory.hint_update(stage, attached, detached)
                    await memory.hint_update(shared_stage, prompts[0][:10], [])
            stages = [*range(num_clients), shared_stage]
            queries = prompts + [p[:len(p) // 2] for p in prompts]
            assert await stores[0].hint_lookup(queries, stages) == await memory.hint_lookup(queries, stages)
            for s in stages:
                assert await stores[-1].hint_count(s) == await memory.hint_count(s)
            # the shared stage counted every client's attaches: it takes that many detaches to evict
            await stores[1].hint_update(shared_stage, [], prompts[0][:10] * (num_clients * 30 - 1))
            assert (await stores[2].hint_lookup([prompts[0]], [shared_stage]))[0].per_stage == (10,)
            await stores[3].hint_update(shared_stage, [], prompts[0][:10])
            assert await stores[0].hint_count(shared_stage) == 0
        finally:
            for s in stores:
                await s.close()
    asyncio.run(body())
