"""Our sim on an oracle scenario (tests/data/oracle/scenarios.json), read back as the oracle fixtures record it.

A peer's step is one scheduler call; ours is one wave (the planner's call). Each request arrives before the
wave its fixture says it arrived before (``arrival_step``: the scenario's own steps, or the steps a closed
loop brought it in the oracle's run), so both runs face the same arrivals. From the stage-0 execute spans
(each carries its wave's chunks: request, start, tokens) come the tokens each wave scheduled per request and
each request's first scheduling: its wave and its first chunk's start, the prefix it did not compute (the hit).
"""

from __future__ import annotations

import json
from array import array
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.scripts_loader import load_script
from wavepp.runtime.arrivals import ArrivalPort
from wavepp.runtime.bench.runs import BenchConfig, run_one
from wavepp.runtime.control.knobs import Knobs
from wavepp.runtime.engines.config import SimConfig
from wavepp.runtime.engines.sim.engine import SimEngine
from wavepp.runtime.kvcache.hashing import block_hashes
from wavepp.runtime.request import Request
from wavepp.runtime.sources.workloads import parse_workload
from wavepp.telemetry import names as N

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "data" / "oracle"
# A model whose context holds the 32K-token document (the decisions compared do not depend on it).
MODEL, HARDWARE = "glm-5.2", "b300"


# The prompt rule the oracle drivers use (scripts/oracle/scenarios.py, standard library only).
SCENARIOS = load_script("oracle/scenarios.py", "oracle_scenarios")


def load_fixture(name: str) -> dict[str, Any]:
    return json.loads((FIXTURES / f"{name}.json").read_text())  # type: ignore[no-any-return]


class StepArrivals:
    """An arrival source whose requests arrive before given waves: the ones for wave 0 at the start, the ones
    for wave k as wave k-1 is planned (before the loop's next admission round and plan)."""

    open_loop = True

    def __init__(self, requests: list[tuple[Request, int]]) -> None:
        self.requests = sorted(requests, key=lambda rs: rs[1])
        self.num_requests = len(requests)
        self.issued = 0

    @property
    def exhausted(self) -> bool:
        return self.issued >= self.num_requests

    def primed_prompts(self) -> list[tuple[array[int], list[int]]]:
        return []

    def working_set_tokens(self) -> int:
        return 0

    def next_request(self, now: float) -> Request:
        raise NotImplementedError("arrivals come at their waves")

    def _arrive_due(self, port: ArrivalPort, planned: int) -> None:
        while not self.exhausted and self.requests[self.issued][1] <= planned:
            port.arrive(self.requests[self.issued][0])
            self.issued += 1

    async def arrivals(self, port: ArrivalPort) -> None:
        run = port.run
        plan = run.planned

        def planned(wave: Any) -> None:
            plan(wave)
            self._arrive_due(port, run.num_planned)
        run.planned = planned  # type: ignore[method-assign]
        self._arrive_due(port, 0)
        await port.done.wait()

    def ended(self, port: ArrivalPort) -> None:
        port.run.changed.notify()


@dataclass(frozen=True, slots=True)
class Decisions:
    """Per wave, the tokens scheduled per request; per request, its first scheduling (wave, hit)."""

    steps: list[dict[str, int]]
    first: dict[str, tuple[int, int]]


def oracle_decisions(fixture: dict[str, Any]) -> Decisions:
    """The oracle's steps that scheduled anything (an empty batch is a peer's idle call, not a wave)."""
    busy = [s for s in fixture["steps"] if s["scheduled"]]
    index = {s["step"]: i for i, s in enumerate(busy)}
    first = {rid: (index[v["step"]], v["hit"]) for rid, v in fixture["first_scheduling"].items()}
    return Decisions([s["scheduled"] for s in busy], first)


def run_sim(fixture: dict[str, Any], policy: str, knobs: Knobs, pp: int) -> Decisions:
    """Our sim on the fixture's scenario and arrivals (the fixture's block size), under ``policy``."""
    scenario = SCENARIOS.load(fixture["scenario"])
    block = int(fixture["settings"]["block_size"])
    busy = [s["step"] for s in fixture["steps"] if s["scheduled"]]
    arrivals = {rid: sum(1 for b in busy if b < step) for rid, step in fixture["arrival_step"].items()}
    reqs = []
    for r in scenario.requests:
        tokens = array("I", r.tokens())
        reqs.append((Request(r.id, tokens, 0.0, block_hashes(tokens, block), f"doc{r.doc}"), int(arrivals[r.id])))
    engine = SimEngine(SimConfig(MODEL, HARDWARE, pp, block_size=block))
    cfg = BenchConfig(parse_workload("cold"), [len(reqs)], [policy], len(reqs), knobs=knobs)
    rec = run_one(engine, cfg, policy, len(reqs), workload=StepArrivals(reqs))  # type: ignore[arg-type]
    by_wave: dict[int, dict[str, int]] = {}
    first: dict[str, tuple[int, int]] = {}
    for sp in sorted((s for s in rec.encoded if s["n"] == N.EXECUTE and s["a"].get(N.STAGE) == 0),
                     key=lambda s: int(s["a"][N.WAVE_ID])):
        a, wave = sp["a"], int(sp["a"][N.WAVE_ID])
        chunks = by_wave.setdefault(wave, {})
        for rid, start, n in zip(a[N.REQUEST_IDS], a[N.CHUNK_STARTS], a[N.CHUNK_TOKENS], strict=True):
            chunks[rid] = chunks.get(rid, 0) + int(n)
            first.setdefault(rid, (wave, int(start)))
    if rec.loop.failures:
        raise RuntimeError(f"{fixture['scenario']} under {policy}: requests failed: {rec.loop.failures}")
    return Decisions([by_wave[w] for w in sorted(by_wave) if by_wave[w]], first)


def first_difference(oracle: list[dict[str, int]], ours: list[dict[str, int]]) -> int | None:
    """The first step whose scheduled tokens differ (None: the same steps)."""
    for i in range(max(len(oracle), len(ours))):
        if i >= len(oracle) or i >= len(ours) or oracle[i] != ours[i]:
            return i
    return None
