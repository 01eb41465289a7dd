"""A policy is a frozen composition of mechanisms, one per kind (see :mod:`runtime.mechanisms`).

The loop, the report and the dashboard call a policy's hooks and ask what it runs -
``policy.mechanisms()`` - and never test its name. A baseline differs from ``wavepp`` only in the
mechanisms its preset names, each citing its source. The kinds and their variants come from one
registry per kind (:data:`KINDS`): an ablation swaps one variant by name (``NAME+KIND=VARIANT``),
and a new variant is registered in its own module and nothing else.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from wavepp.runtime.kvcache.pools import POOL, CachePool, PerStage
from wavepp.runtime.mechanisms.admission_drive import ADMISSION, AdmissionDrive
from wavepp.runtime.mechanisms.block_publication import PUBLISH, AtCompletion, BlockPublication
from wavepp.runtime.mechanisms.chunking import CHUNKING, Chunking
from wavepp.runtime.mechanisms.host_work import HOST, HostWork, Overlapped
from wavepp.runtime.mechanisms.iteration import (
    FILL,
    RELAY,
    RETURN,
    RING,
    DirectReturn,
    Fill,
    Relay,
    ReturnPath,
    RingSize,
)
from wavepp.runtime.mechanisms.lookup_moment import LOOKUP_MOMENT, LookupMoment, OnAdmission
from wavepp.runtime.mechanisms.ports import PlanInputs, WaveSettings
from wavepp.runtime.mechanisms.reserve import RESERVE, Reserve, SuffixBlocks
from wavepp.runtime.mechanisms.reuse_lookup import LOOKUP, ReuseLookup
from wavepp.runtime.mechanisms.sharing import SHARING, ComputeAgain, Sharing
from wavepp.runtime.mechanisms.stage_admission import STAGE_ADMISSION, StageAdmission
from wavepp.runtime.mechanisms.token_charge import CHARGE, TokenCharge
from wavepp.runtime.mechanisms.topology import TOPOLOGY, Pipeline, Topology
from wavepp.runtime.planning.planner import Planner, Waiting, nothing_waiting
from wavepp.runtime.planning.step_times import StepTimes
from wavepp.runtime.registry import Registry


@dataclass(frozen=True, slots=True)
class Policy:
    name: str
    admission: AdmissionDrive
    lookup: ReuseLookup
    stage_admission: StageAdmission
    charge: TokenCharge
    chunking: Chunking
    ring: RingSize
    fill: Fill
    relay: Relay
    reserve: Reserve = SuffixBlocks()
    host: HostWork = Overlapped()
    return_path: ReturnPath = DirectReturn()
    pool: CachePool = PerStage()             # fixed for a run: the engine builds the caches with it
    share: Sharing = ComputeAgain()
    topology: Topology = Pipeline()          # fixed for a run: the engine lays its stages out by it
    lookup_at: LookupMoment = OnAdmission()
    publish: BlockPublication = AtCompletion()

    def mechanisms(self) -> dict[str, str]:
        """Kind -> variant name: what this policy runs (saved with every run)."""
        return {kind: getattr(self, registry.field).name for kind, registry in KINDS.items()}

    def ring_size(self, knobs: WaveSettings, num_stages: int) -> int:
        return self.ring.size(knobs, num_stages)

    def make_planner(self, knobs: WaveSettings, num_stages: int, block_size: int, step_times: StepTimes,
                     waiting: Waiting = nothing_waiting) -> Planner:
        return self.chunking.planner(PlanInputs(knobs, num_stages, block_size, self.ring_size(knobs, num_stages),
                                                self.charge.position, step_times, waiting))

    def with_mechanism(self, kind: str, variant: str) -> Policy:
        """The same policy with one mechanism swapped (an ablation), named ``<name>+<kind>=<variant>``."""
        if kind not in KINDS:
            raise ValueError(f"unknown mechanism kind {kind[:40]!r} (known: {', '.join(KINDS)})")
        registry = KINDS[kind]
        changes: dict[str, Any] = {registry.field: registry.get(variant)}
        return dataclasses.replace(self, name=f"{self.name}+{kind}={variant}", **changes)


#: every mechanism kind (as written in a policy spec) -> its registry of variants
KINDS: dict[str, Registry[Any]] = {r.kind: r for r in (
    ADMISSION, LOOKUP, STAGE_ADMISSION, CHARGE, CHUNKING, RING, FILL, RELAY, RESERVE, HOST, RETURN, POOL, SHARING,
    TOPOLOGY, LOOKUP_MOMENT, PUBLISH)}
