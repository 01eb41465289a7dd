"""A policy is a frozen composition of mechanisms, one per kind (see :mod:`runtime.mechanisms`).

The loop, the report and the dashboard ask a policy what it does - ``policy.admission.inline``,
``policy.mechanisms()`` - and never test its name. A baseline differs from ``wavepp`` only in the
mechanisms its preset names, each citing its source.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from wavepp.runtime.knobs import Knobs
from wavepp.runtime.mechanisms.admission_drive import AdmissionDrive, AsyncRounds, InlineRounds
from wavepp.runtime.mechanisms.chunking import CHUNKINGS, Chunking, Mpu, Static
from wavepp.runtime.mechanisms.host_work import HostWork, Lockstep, Overlapped
from wavepp.runtime.mechanisms.iteration import FillWaves, RequestRelay, ReturnPath, Ring
from wavepp.runtime.mechanisms.reserve import Reserve, SuffixBlocks, WholePrompt
from wavepp.runtime.mechanisms.reuse_lookup import FirstStageTree, HintIndex, ReuseLookup
from wavepp.runtime.mechanisms.stage_admission import EveryStage, OnFirstChunk, StageAdmission
from wavepp.runtime.mechanisms.token_charge import FromPositionZero, SuffixOnly, TokenCharge
from wavepp.runtime.planner import Planner


@dataclass(frozen=True, slots=True)
class Policy:
    name: str
    admission: AdmissionDrive
    lookup: ReuseLookup
    stage_admission: StageAdmission
    charge: TokenCharge
    chunking: Chunking
    ring: Ring
    fill: FillWaves
    relay: RequestRelay
    reserve: Reserve = SuffixBlocks()
    host: HostWork = Overlapped()
    return_path: ReturnPath = ReturnPath(False)

    def mechanisms(self) -> dict[str, str]:
        """Kind -> variant name: what this policy runs (saved with every run)."""
        return {kind: getattr(self, field).name for kind, field in KIND_FIELDS.items()}

    def ring_size(self, knobs: Knobs, num_stages: int) -> int:
        return self.ring.size(knobs, num_stages)

    def make_planner(self, knobs: Knobs, num_stages: int, block_size: int) -> Planner:
        chunking = self.chunking if knobs.planner == "auto" else CHUNKINGS[knobs.planner]
        return chunking.planner(knobs, num_stages, block_size, self.ring_size(knobs, num_stages), self.charge)

    def with_mechanism(self, kind: str, variant: str) -> Policy:
        """The same policy with one mechanism swapped (an ablation), named ``<name>+<kind>=<variant>``."""
        if kind not in VARIANTS:
            raise ValueError(f"unknown mechanism kind {kind!r} (known: {', '.join(VARIANTS)})")
        if variant not in VARIANTS[kind]:
            raise ValueError(f"unknown {kind} variant {variant!r} (known: {', '.join(VARIANTS[kind])})")
        changes: dict[str, Any] = {KIND_FIELDS[kind]: VARIANTS[kind][variant]}
        return dataclasses.replace(self, name=f"{self.name}+{kind}={variant}", **changes)


#: mechanism kind (as written in a policy spec) -> Policy field
KIND_FIELDS = {"admission": "admission", "lookup": "lookup", "stage-admission": "stage_admission",
               "charge": "charge", "chunking": "chunking", "ring": "ring", "fill": "fill", "relay": "relay",
               "reserve": "reserve", "host": "host", "return": "return_path"}

#: every variant of every kind, by name
VARIANTS: dict[str, dict[str, object]] = {
    "admission": {v.name: v for v in (AsyncRounds(), InlineRounds())},
    "lookup": {v.name: v for v in (HintIndex(), FirstStageTree())},
    "stage-admission": {v.name: v for v in (EveryStage(), OnFirstChunk())},
    "charge": {v.name: v for v in (SuffixOnly(), FromPositionZero())},
    "chunking": {v.name: v for v in (Mpu(), Static())},
    "ring": {v.name: v for v in (Ring(2), Ring(1))},
    "fill": {v.name: v for v in (FillWaves(True), FillWaves(False))},
    "relay": {v.name: v for v in (RequestRelay(True), RequestRelay(False))},
    "reserve": {v.name: v for v in (SuffixBlocks(), WholePrompt())},
    "host": {v.name: v for v in (Overlapped(), Lockstep())},
    "return": {v.name: v for v in (ReturnPath(False), ReturnPath(True))},
}
