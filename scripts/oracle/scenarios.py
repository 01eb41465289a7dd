"""The oracle scenarios (tests/data/oracle/scenarios.json): prompts and arrivals, shared by every oracle driver.

Standard library only: the drivers run in their own virtual environments (``make oracle``), without wavepp.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = ROOT / "tests" / "data" / "oracle" / "scenarios.json"
OUT = ROOT / "tests" / "data" / "oracle"


@dataclass(frozen=True, slots=True)
class OracleRequest:
    id: str
    index: int                 # position in the scenario (the suffix rule's i)
    doc: int
    doc_tokens: int
    suffix_tokens: int
    arrival_step: int | None   # None: a closed loop brings it

    def tokens(self) -> list[int]:
        doc = [1 + (self.doc * 7919 + t * 104729) % 30000 for t in range(self.doc_tokens)]
        return doc + [30001 + (self.index * 131 + t) % 2000 for t in range(self.suffix_tokens)]


@dataclass(frozen=True, slots=True)
class Scenario:
    name: str
    arrivals: str              # "steps" or "closed-loop"
    concurrency: int
    requests: list[OracleRequest]


def load(name: str, path: Path = SCENARIOS) -> Scenario:
    spec: dict[str, Any] = json.loads(path.read_text())["scenarios"][name]
    reqs = [OracleRequest(r["id"], i, r["doc"], r["doc_tokens"], r["suffix_tokens"], r.get("arrival_step"))
            for i, r in enumerate(spec["requests"])]
    return Scenario(name, spec["arrivals"], int(spec.get("concurrency", len(reqs))), reqs)


class Arrivals:
    """Which requests arrive before a step: at their own step, or as a closed loop (``concurrency`` at
    first, the next one after each request finishes)."""

    def __init__(self, scenario: Scenario) -> None:
        self.scenario = scenario
        self.next = 0
        self.finished = 0

    @property
    def exhausted(self) -> bool:
        return self.next >= len(self.scenario.requests)

    def due(self, step: int) -> list[OracleRequest]:
        reqs, out = self.scenario.requests, []
        while self.next < len(reqs):
            r = reqs[self.next]
            if self.scenario.arrivals == "steps":
                assert r.arrival_step is not None
                if r.arrival_step > step:
                    break
            elif self.next - self.finished >= self.scenario.concurrency:
                break
            out.append(r)
            self.next += 1
        return out


def write_fixture(name: str, fixture: dict[str, Any]) -> Path:
    """One fixture file: the header keys one a line, then each step on one line (a readable diff)."""
    path = OUT / f"{name}.json"
    steps = fixture.pop("steps")
    head = ",\n".join(f" {json.dumps(k)}: {json.dumps(v)}" for k, v in fixture.items())
    body = ",\n".join("  " + json.dumps(s) for s in steps)
    path.write_text("{\n" + head + ',\n "steps": [\n' + body + "\n ]\n}\n")
    fixture["steps"] = steps
    return path
