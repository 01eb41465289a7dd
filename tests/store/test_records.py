"""The typed records and their JSON form: what the runtime writes round-trips exactly (key order
included: the Redis entries, saved runs and /v1/state hold it), and what another client wrote is
read without raising - a status record accepted or refused exactly as the runtime always did."""

from __future__ import annotations

import json
from typing import Any

import pytest

from wavepp.store.records import PlannedChunk, StageStatus, StatusSnapshot, WavePlanRecord

STAGE = StageStatus(stage=1, capacity=3000, cached=819, free=2181, leases=2, escrowed=64, evictions=5)
STATUS = StatusSnapshot(t=1767225600749881911, run="20261201T112520Z-1a2b3c", wall=1764588320.5, state="finished",
                        policy="trtllm-pp", waiting=3, active=5, in_flight=2, ring=4, finished=64, failed=1,
                        knobs_version=4, knobs_refused={"version": 5, "reason": "bad", "running": 4},
                        stages=(StageStatus(0, 3000, 819, 2181, 0, 0, 0), STAGE))
PLAN = WavePlanRecord(wave=7, budget=8192, planned_at=0.0573416052565905, policy="wavepp",
                      chunks=(PlannedChunk("r1", 0, 4096, 0, False), PlannedChunk("r2", 1024, 64, 16, True)))


def test_a_status_snapshot_round_trips_in_the_runtime_s_key_order() -> None:
    data = STATUS.to_json()
    assert list(data) == ["t", "run", "wall", "state", "policy", "waiting", "active", "in_flight", "ring",
                          "finished", "failed", "knobs_version", "knobs_refused", "stages"]
    assert list(data["stages"][1]) == ["stage", "capacity", "cached", "free", "leases", "escrowed", "evictions"]
    assert data["stages"][1] == {"stage": 1, "capacity": 3000, "cached": 819, "free": 2181, "leases": 2,
                                 "escrowed": 64, "evictions": 5}
    text = json.dumps(data, separators=(",", ":"))
    assert StatusSnapshot.from_json(json.loads(text)) == STATUS
    assert json.dumps(StatusSnapshot.from_json(json.loads(text)).to_json(), separators=(",", ":")) == text  # type: ignore[union-attr]


def test_a_wave_plan_round_trips_in_the_dispatcher_s_key_order() -> None:
    data = PLAN.to_json()
    assert data == {"wave": 7, "budget": 8192, "planned_at": 0.0573416052565905, "policy": "wavepp", "chunks": [
        {"request": "r1", "start": 0, "tokens": 4096, "reuse_blocks": 0, "last": False},
        {"request": "r2", "start": 1024, "tokens": 64, "reuse_blocks": 16, "last": True}]}
    assert list(data) == ["wave", "budget", "planned_at", "policy", "chunks"]
    assert list(data["chunks"][0]) == ["request", "start", "tokens", "reuse_blocks", "last"]
    text = json.dumps(data, separators=(",", ":"))
    assert WavePlanRecord.from_json(json.loads(text)) == PLAN


def _accepted_before(status: Any) -> bool:
    """How ``store.redis_records.decode_status`` judged a parsed record before the typed records."""
    return (isinstance(status, dict) and isinstance(status.get("t"), int) and isinstance(status.get("run", ""), str)
            and isinstance(status.get("stages"), list))


FOREIGN: list[Any] = [
    None, 1, "x", [], [1, 2], {}, {"t": 1}, {"stages": []}, {"t": "1", "stages": []}, {"t": 1.0, "stages": []},
    {"t": True, "stages": []}, {"t": 1, "stages": {}}, {"t": 1, "stages": None}, {"t": 1, "run": 5, "stages": []},
    {"t": 1, "run": None, "stages": []}, {"t": 1, "run": "r", "stages": []}, {"t": 1, "stages": [1, "x", None]},
    {"t": 1, "stages": [{"stage": "a", "capacity": 3000.0, "cached": "many"}, {}]},
    {"t": 1, "wall": "noon", "state": 3, "waiting": "x", "active": 2.0, "in_flight": None, "knobs_version": 3.0,
     "knobs_refused": "no", "stages": [], "extra": {"kept": False}},
    {"t": -5, "run": "", "wall": 12, "state": "failed: x", "stages": []},
]


@pytest.mark.parametrize("data", FOREIGN)
def test_another_client_s_status_is_accepted_or_refused_as_before_and_never_raises(data: Any) -> None:
    record = StatusSnapshot.from_json(data)
    assert (record is not None) == _accepted_before(data)
    if record is not None:
        json.dumps(record.to_json())                 # a record read back is always writable again


def test_fields_missing_or_of_another_type_read_as_their_defaults() -> None:
    assert StatusSnapshot.from_json({"t": 1, "stages": []}) == StatusSnapshot(1)
    odd = StatusSnapshot.from_json(FOREIGN[-2])
    assert odd == StatusSnapshot(1, wall=None, state="running", waiting=0, active=2, in_flight=0, knobs_version=3,
                                 knobs_refused=None)
    stages = StatusSnapshot.from_json(FOREIGN[-3])
    assert stages is not None and stages.stages == (StageStatus(0, 3000, 0, 0, 0, 0, 0),
                                                    StageStatus(1, 0, 0, 0, 0, 0, 0))
    assert StatusSnapshot.from_json({"t": 1, "stages": [1, "x", None]}) == StatusSnapshot(1)   # no stage entries
    kept = StatusSnapshot.from_json(FOREIGN[-1])
    assert kept == StatusSnapshot(-5, wall=12, state="failed: x")


@pytest.mark.parametrize("data", [None, 1, "plan", [], [{"wave": 1}]])
def test_a_plan_that_is_not_a_json_object_is_refused(data: Any) -> None:
    assert WavePlanRecord.from_json(data) is None


def test_any_json_object_is_a_plan_its_missing_fields_zero() -> None:
    assert WavePlanRecord.from_json({}) == WavePlanRecord(0)
    assert WavePlanRecord.from_json({"wave": 3, "budget": "big", "planned_at": True, "policy": 1,
                                     "chunks": [[3, 10], {"request": "a", "tokens": 64.0, "last": 1}, None]}) == \
        WavePlanRecord(3, chunks=(PlannedChunk("a", 0, 64, 0, False),))
    assert WavePlanRecord.from_json({"wave": 2, "chunks": "none"}) == WavePlanRecord(2)
