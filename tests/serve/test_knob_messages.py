"""``PUT /v1/knobs`` and ``wavepp knobs --set`` refuse a bad knob with one validator: the same
message for the same value on both paths (a retired knob says what replaced it, a budget that is no
whole number of blocks names the nearest valid values), and a ``null`` is refused with nothing
written - no version bump, no history entry."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from tests.api_client import api_on
from wavepp.runtime.cli import main
from wavepp.runtime.control.knobs import RETIRED
from wavepp.runtime.engines.config import SimConfig
from wavepp.runtime.engines.sim.engine import SimEngine

# (what the CLI's --set says, the same knob as JSON)
SAME_VALUE = [("planner=mpu", {"planner": "mpu"}),
              ("max_wave_tokens=8200", {"max_wave_tokens": 8200}),
              ("ring=-1", {"ring": -1}),
              ("max_leases=0", {"max_leases": 0}),
              ("policy=fastest", {"policy": "fastest"}),
              ("bogus=1", {"bogus": 1})]


@pytest.fixture
def url(redis_cluster: Callable[[str], str]) -> str:
    return redis_cluster("knob-messages")


def _cli_error(url: str, change: str, capsys: pytest.CaptureFixture[str]) -> str:
    assert main(["knobs", "--store", url, "--set", change]) == 2
    return capsys.readouterr().err.strip().removeprefix("wavepp: error: ")


def test_the_api_and_the_cli_refuse_a_knob_with_the_same_message(url: str,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    engine = SimEngine(SimConfig("llama-3-8b", "h200", 2, kv_blocks=[500], store_url=url, clock="wall"))
    answers: list[tuple[int, dict[str, Any]]] = []

    async def body() -> None:
        async with api_on(engine) as (api, rt):
            for _, changes in SAME_VALUE:
                r = await api.put("/v1/knobs", json={"changes": changes})
                answers.append((r.status_code, r.json()["error"]))
    asyncio.run(body())
    for (change, changes), (status, error) in zip(SAME_VALUE, answers, strict=True):
        name = next(iter(changes))
        assert status == 422 and error["param"] == name, (change, error)
        assert error["message"] == _cli_error(url, change, capsys), change
    messages = dict(zip([c for c, _ in SAME_VALUE], [e["message"] for _, e in answers], strict=True))
    assert messages["planner=mpu"] == f"planner: {RETIRED['planner']}"
    assert "nearest: 8192 or 8256" in messages["max_wave_tokens=8200"]


@pytest.mark.parametrize("changes", [{"ring": None}, {"policy": None}, {"hysteresis": None},
                                     {"ring": 2, "fill_factor": None}, {}])
def test_a_null_or_empty_change_is_refused_and_writes_nothing(url: str, changes: dict[str, Any]) -> None:
    engine = SimEngine(SimConfig("llama-3-8b", "h200", 2, kv_blocks=[500], store_url=url, clock="wall"))
    seen: dict[str, Any] = {}

    async def body() -> None:
        async with api_on(engine) as (api, rt):
            before = (await api.get("/v1/knobs")).json()
            seen["put"] = await api.put("/v1/knobs", json={"changes": changes,
                                                           "expected_version": before["version"]})
            seen["after"] = (await api.get("/v1/knobs")).json()
            seen["history"] = await rt.store.knobs_history(10) if rt.store else None
            seen["before"] = before
    asyncio.run(body())
    put = seen["put"]
    assert put.status_code == 422, put.text
    error = put.json()["error"]
    if changes:
        bad = next(k for k, v in changes.items() if v is None)
        assert error["param"] == bad and "null" in error["message"], error
    assert seen["after"]["version"] == seen["before"]["version"]
    assert seen["after"]["knobs"] == seen["before"]["knobs"]
    assert [h["version"] for h in seen["history"]] == [seen["before"]["version"]]
