"""The autopilot beside a real loop: the virtual-time sim (deterministic), the in-process store, and its
reading of the store (an operator's write, an outage)."""

from __future__ import annotations

import asyncio
import json
import logging
from types import SimpleNamespace
from typing import Any

import pytest

from wavepp.runtime.autopilot.pilot import Candidate, Search
from wavepp.runtime.autopilot.runner import AutopilotRunner, companion
from wavepp.runtime.autopilot.settings import AutopilotSettings
from wavepp.runtime.autopilot.window import WindowFigures
from wavepp.runtime.bench.runs import BenchConfig, RunRecord, run_one
from wavepp.runtime.control.knobs import Knobs, validated_values
from wavepp.runtime.engines.config import SimConfig
from wavepp.runtime.engines.sim.engine import SimEngine
from wavepp.runtime.sources.workloads import parse_workload
from wavepp.store.base import StoreError
from wavepp.store.deployment import Deployment
from wavepp.store.memory import MemoryStore
from wavepp.telemetry import names as N
from wavepp.telemetry.metrics import WaveppMetrics

WINDOW_S = 0.5          # of virtual time: ~330 requests a window on llama-3-8b / H200, PP4, c = 32, 4K prompts


def bench(mode: str, knobs: Knobs, predictor: Any = None, metrics: WaveppMetrics | None = None,
          requests: int = 2400) -> RunRecord:
    settings = AutopilotSettings(mode=mode, window_s=WINDOW_S, search_s=600)
    cfg = BenchConfig(parse_workload("reuse90"), [32], ["wavepp"], requests, knobs=knobs, prompt_tokens=4096,
                      companions=[companion(settings, predictor)], metrics=metrics)
    return run_one(SimEngine(SimConfig("llama-3-8b", "h200", 4)), cfg, "wavepp", 32)


def decisions(record: RunRecord) -> list[tuple[str, float, dict[str, Any]]]:
    return [(d[N.AUTOPILOT_ACTION], json.loads(d[N.AUTOPILOT_WINDOW])["input_tps"], d)
            for d in record.meta["autopilot"]]


def test_ring_1_is_found_applied_and_the_next_window_is_faster_as_predicted() -> None:
    """Suggest's search on the window's own arrivals finds a ring that fills the pipeline; the apply is
    written through the store, the loop takes it, and the window after it runs as predicted. Its decision
    spans and metrics say so."""
    metrics = WaveppMetrics()
    record = bench("on", Knobs(ring=1), metrics=metrics)
    made = decisions(record)
    actions = [a for a, _, _ in made]
    assert actions[:3] == ["hold", "apply", "keep"], made
    (_, before, applied), (_, after, verdict) = made[1], made[2]
    assert json.loads(applied[N.AUTOPILOT_CHOSEN])["ring"] > 1 and applied[N.AUTOPILOT_VERSION] >= 2
    assert after > 2 * before
    assert verdict[N.AUTOPILOT_VERDICT] == "kept"
    assert abs(verdict[N.AUTOPILOT_OBSERVED_GAIN] - applied[N.AUTOPILOT_PREDICTED_GAIN]) < 0.1
    assert "apply" not in actions[2:]
    assert [c for _, c in record.loop.knob_changes] == [json.loads(applied[N.AUTOPILOT_CHOSEN])]
    spans = [s for s in record.encoded if s["n"] == N.AUTOPILOT_DECISION]
    assert [s["a"][N.AUTOPILOT_ACTION] for s in spans] == actions
    text = metrics.render()[0].decode()
    assert 'wavepp_autopilot_decisions_total{action="apply"} 1.0' in text
    assert "wavepp_autopilot_applies_total 1.0" in text
    assert 'wavepp_autopilot_prediction_error_bucket{le="+Inf"} 1.0' in text      # its count (no _count line)


def test_advise_recommends_and_never_writes_a_knob() -> None:
    record = bench("advise", Knobs(ring=1), requests=1200)
    made = decisions(record)
    assert "advise" in [a for a, _, _ in made] and "apply" not in [a for a, _, _ in made]
    assert record.loop.knob_changes == []
    advised = next(d for a, _, d in made if a == "advise")
    assert json.loads(advised[N.AUTOPILOT_CHOSEN])["ring"] > 1 and N.AUTOPILOT_VERSION not in advised


def test_a_wrong_model_is_rolled_back_within_two_windows_and_not_applied_again() -> None:
    """A model that says ring 1 is 50 % faster than the default ring (it is 3-4x slower): applied, rolled
    back in the window after, and the search after the cooldown keeps the knobs."""
    calls: list[int] = []

    def wrong(w: WindowFigures, knobs: Knobs, settings: AutopilotSettings) -> Search:
        calls.append(w.index)
        return Search(w.input_tps, 0.01, [Candidate(knobs.replace(ring=1), 1.5 * w.input_tps)], 1, 1)
    record = bench("on", Knobs(), predictor=wrong, requests=3600)
    actions = [a for a, _, _ in decisions(record)]
    applied = actions.index("apply")
    assert actions[applied + 1] == "rollback", actions
    assert actions.count("apply") == 1 and len(calls) >= 2
    assert [c["ring"] for _, c in record.loop.knob_changes] == [1, 0]


def _runner(store: MemoryStore, settings: AutopilotSettings) -> AutopilotRunner:
    loop = SimpleNamespace(store=store, knob_watcher=SimpleNamespace(deployment=Deployment(16, 4)))
    return AutopilotRunner(loop, settings, predictor=lambda *a: Search(0.0, 0.0, ()), virtual=True)  # type: ignore[arg-type]


def test_an_operator_knob_write_freezes_it_until_the_operator_resumes_it() -> None:
    async def body() -> None:
        store = MemoryStore()
        runner = _runner(store, AutopilotSettings(mode="on"))
        await store.knobs_set({"ring": 8}, validate=validated_values)                  # the runtime publishes
        settings, knobs = await runner._read()
        assert not settings.frozen and knobs == Knobs(ring=8)
        ours = await store.knobs_set({"ring": 16}, validate=validated_values)         # the autopilot's write
        runner._mine.add(ours.version)
        assert not (await runner._read())[0].frozen
        await store.knobs_set({"ring": 4}, validate=validated_values)                  # an operator's
        settings, _ = await runner._read()
        assert settings.frozen and "operator wrote knobs version 3" in settings.frozen_why
        assert (await store.autopilot_get() or {})["frozen"] is True                  # the dashboard shows it
        await store.autopilot_put(settings.resumed().as_dict())                        # the operator resumes
        assert not (await runner._read())[0].frozen
    asyncio.run(body())


class Outage(MemoryStore):
    down = True

    async def autopilot_get(self) -> dict[str, Any] | None:
        if self.down:
            raise StoreError("redis at 127.0.0.1:1 is unreachable")
        return await super().autopilot_get()

    async def autopilot_put(self, record: dict[str, Any]) -> None:
        if self.down:
            raise StoreError("redis at 127.0.0.1:1 is unreachable")
        await super().autopilot_put(record)


def test_a_store_outage_pauses_it_with_one_line_and_it_resumes(caplog: pytest.LogCaptureFixture) -> None:
    async def body() -> None:
        store = Outage()
        await store.knobs_set({"ring": 8}, validate=validated_values)
        runner = _runner(store, AutopilotSettings(mode="on"))
        with caplog.at_level(logging.WARNING, logger="wavepp.runtime.autopilot.runner"):
            assert await runner._window(0, 0, 10**9) is None
            assert await runner._window(1, 10**9, 2 * 10**9) is None
            store.down = False
            runner.loop.num_stages, runner.loop.workload = 4, SimpleNamespace(exhausted=False, open_loop=False,
                                                                              held_by_cap=0)
            decision = await runner._window(2, 2 * 10**9, 3 * 10**9)
        assert decision is not None and decision.action == "hold"
        lines = [r.getMessage() for r in caplog.records]
        assert len([m for m in lines if "paused" in m]) == 1 and any("resumed" in m for m in lines)
    asyncio.run(body())


def _request_spans(n: int, t0_s: float, tokens: int = 1000) -> list[dict[str, Any]]:
    """``n`` requests that arrived and ended within the second from ``t0_s``."""
    start = int(t0_s * 1e9)
    return [{"n": N.REQUEST, "t0": start + i, "t1": start + 500_000_000 + i,
             "a": {N.GEN_AI_INPUT_TOKENS: tokens, N.REUSABLE_TOKENS: 0}} for i in range(n)]


@pytest.mark.parametrize(("held", "shift"), [((0, 0), True), ((0, 5), False)])
def test_the_arrival_rate_is_a_shift_only_where_the_concurrency_cap_held_nothing_back(
        held: tuple[int, int], shift: bool) -> None:
    """Twice the arrivals in the second window: a shift of an open loop's workload - unless its concurrency
    cap held arrivals back in that window, where arrivals follow completions (and the knobs move them)."""
    async def body() -> list[str | None]:
        store = MemoryStore()
        await store.knobs_set({"ring": 8}, validate=validated_values)
        source = SimpleNamespace(open_loop=True, held_by_cap=0, exhausted=False)
        loop = SimpleNamespace(store=store, knob_watcher=SimpleNamespace(deployment=Deployment(16, 4)),
                               workload=source, num_stages=4)
        runner = AutopilotRunner(loop, AutopilotSettings(mode="advise"),  # type: ignore[arg-type]
                                 predictor=lambda *a: Search(0.0, 0.0, ()), virtual=True)
        shifts = []
        for index, (count, cap_held) in enumerate(zip((40, 80), held, strict=True)):
            source.held_by_cap = cap_held
            runner._spans.extend(_request_spans(count, float(index)))
            decision = await runner._window(index, int(index * 1e9), int((index + 1) * 1e9))
            shifts.append(decision.shift if decision is not None else "no decision")
        return shifts
    first, second = asyncio.run(body())
    assert first is None
    assert (second is not None and "arrival rate 40 -> 80" in second) == shift, second
