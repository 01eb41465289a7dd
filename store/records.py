"""The records that cross the layers: a wave's plan and the runtime's status snapshot.

Who makes and who reads them::

    WavePlanRecord  loop's dispatcher ─► Store.plan_publish ─► plans_recent / plans_in_flight ─► readers
    StatusSnapshot  PipelineLoop.status() ─► telemetry (metrics gauges), Store.status_put / status_get,
                    the run's history (LoopResult.status, saved runs) ─► the dashboard, /v1/state

Their JSON form is written by ``to_json`` and read back by ``from_json``, here and nowhere else: the
Redis store, the saved-run file and the server's ``/v1/state`` all hold ``to_json()``. The field
order is the JSON key order (what the files and the HTTP body have always held).

``from_json`` takes what another client may have written (an older runtime, a script, a corrupted
key) and never raises. A plan is any JSON object; a status snapshot any JSON object whose ``t`` is an
integer, whose ``run`` (when present) is a string and whose ``stages`` is a list - anything else is
refused (None). Within an accepted record a field that is missing, or not of its type, reads as its
default - what the readers have always assumed of a record without it - and a chunk or a stage entry
that is not a JSON object is left out.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# ---- tolerant field readers: the value when it has the field's type, else ``default`` -----------


def _int_or_none(data: Mapping[str, Any], key: str) -> int | None:
    """An integer, or a float that is one (3.0); None for anything else (a bool is no number here)."""
    value = data.get(key)
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return int(value)
    return None


def _int(data: Mapping[str, Any], key: str, default: int) -> int:
    value = _int_or_none(data, key)
    return default if value is None else value


def _float_or_none(data: Mapping[str, Any], key: str) -> float | None:
    value = data.get(key)
    return value if isinstance(value, int | float) and not isinstance(value, bool) else None


def _float(data: Mapping[str, Any], key: str, default: float) -> float:
    value = _float_or_none(data, key)
    return default if value is None else value


def _str(data: Mapping[str, Any], key: str, default: str) -> str:
    value = data.get(key)
    return value if isinstance(value, str) else default


def _bool(data: Mapping[str, Any], key: str, default: bool) -> bool:
    value = data.get(key)
    return value if isinstance(value, bool) else default


# ---- the wave plan -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PlannedChunk:
    """One chunk of a planned wave: tokens [start, start + tokens) of ``request``."""

    request: str                 # the request's id
    start: int
    tokens: int
    reuse_blocks: int            # the reuse boundary (blocks) the leader planned with
    last: bool                   # the request's final chunk

    def to_json(self) -> dict[str, Any]:
        return {"request": self.request, "start": self.start, "tokens": self.tokens,
                "reuse_blocks": self.reuse_blocks, "last": self.last}

    @classmethod
    def from_json(cls, data: object) -> PlannedChunk | None:
        if not isinstance(data, dict):
            return None
        return cls(request=_str(data, "request", ""), start=_int(data, "start", 0), tokens=_int(data, "tokens", 0),
                   reuse_blocks=_int(data, "reuse_blocks", 0), last=_bool(data, "last", False))


@dataclass(frozen=True, slots=True)
class WavePlanRecord:
    """What the store keeps of one planned wave: its chunk descriptors (what a restarted stage must
    know of the waves in flight). A plan another client wrote without a field reads it as its zero
    value (a wave id of 0 included: such a plan names no wave of its own)."""

    wave: int                    # the wave's id (the loop numbers its waves from 0)
    budget: int = 0              # the token budget the planner used
    planned_at: float = 0.0      # the engine's clock (virtual seconds on the sim)
    policy: str = ""
    chunks: tuple[PlannedChunk, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"wave": self.wave, "budget": self.budget, "planned_at": self.planned_at, "policy": self.policy,
                "chunks": [c.to_json() for c in self.chunks]}

    @classmethod
    def from_json(cls, data: object) -> WavePlanRecord | None:
        """The plan ``data`` (parsed JSON) holds; None when it is not a JSON object."""
        if not isinstance(data, dict):
            return None
        raw = data.get("chunks")
        chunks = [PlannedChunk.from_json(c) for c in raw] if isinstance(raw, list) else []
        return cls(wave=_int(data, "wave", 0), budget=_int(data, "budget", 0),
                   planned_at=_float(data, "planned_at", 0.0), policy=_str(data, "policy", ""),
                   chunks=tuple(c for c in chunks if c is not None))


# ---- the status snapshot -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class StageStatus:
    """One stage's cache state in a status snapshot (KV blocks; evictions since the run started)."""

    stage: int
    capacity: int                # blocks the stage's pool holds
    cached: int                  # blocks holding a cached prefix
    free: int
    leases: int                  # requests holding pins on the stage
    escrowed: int                # blocks escrowed for admitted requests (promised, not yet taken)
    evictions: int

    def to_json(self) -> dict[str, Any]:
        return {"stage": self.stage, "capacity": self.capacity, "cached": self.cached, "free": self.free,
                "leases": self.leases, "escrowed": self.escrowed, "evictions": self.evictions}

    @classmethod
    def from_json(cls, data: object, position: int) -> StageStatus | None:
        """``position``: where the entry stands in the snapshot's list (its stage when it names none)."""
        if not isinstance(data, dict):
            return None
        return cls(stage=_int(data, "stage", position), capacity=_int(data, "capacity", 0),
                   cached=_int(data, "cached", 0), free=_int(data, "free", 0), leases=_int(data, "leases", 0),
                   escrowed=_int(data, "escrowed", 0), evictions=_int(data, "evictions", 0))


@dataclass(frozen=True, slots=True)
class StatusSnapshot:
    """The runtime's queues and per-stage cache state at one moment, with the run it belongs to.

    The defaults are what a reader takes a record without the field to say (another client's, an
    older runtime's): no wall-clock time, still running, empty queues, no knobs version reported."""

    t: int                       # the span clock (ns): a run's snapshots in order
    run: str = ""                # the run's id: runs sharing a store never mix
    wall: float | None = None    # wall-clock epoch seconds it was taken (a viewer tells a silent runtime)
    state: str = "running"       # running, finished or "failed: <the run's error>"
    policy: str = ""             # the policy in force ("": not said)
    waiting: int = 0             # requests arrived and not admitted
    active: int = 0              # admitted and not finished
    in_flight: int = 0           # waves in the pipeline
    ring: int = 0                # waves the ring lets in flight
    finished: int = 0            # requests that finished or failed
    failed: int = 0
    knobs_version: int | None = None           # the knobs version the runtime runs with
    # The last knobs record it refused: {"version", "reason", "running"} (runtime.control.plane.KnobWatcher).
    knobs_refused: dict[str, Any] | None = None
    stages: tuple[StageStatus, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"t": self.t, "run": self.run, "wall": self.wall, "state": self.state, "policy": self.policy,
                "waiting": self.waiting, "active": self.active, "in_flight": self.in_flight, "ring": self.ring,
                "finished": self.finished, "failed": self.failed, "knobs_version": self.knobs_version,
                "knobs_refused": self.knobs_refused, "stages": [s.to_json() for s in self.stages]}

    @classmethod
    def from_json(cls, data: object) -> StatusSnapshot | None:
        """The snapshot ``data`` (parsed JSON) holds; None when it is not a runtime's status record."""
        if not (isinstance(data, dict) and isinstance(data.get("t"), int) and isinstance(data.get("run", ""), str)
                and isinstance(data.get("stages"), list)):
            return None
        stages = (StageStatus.from_json(s, i) for i, s in enumerate(data["stages"]))
        refused = data.get("knobs_refused")
        return cls(t=data["t"], run=data.get("run", ""), wall=_float_or_none(data, "wall"),
                   state=_str(data, "state", "running"), policy=_str(data, "policy", ""),
                   waiting=_int(data, "waiting", 0), active=_int(data, "active", 0),
                   in_flight=_int(data, "in_flight", 0), ring=_int(data, "ring", 0),
                   finished=_int(data, "finished", 0), failed=_int(data, "failed", 0),
                   knobs_version=_int_or_none(data, "knobs_version"),
                   knobs_refused=refused if isinstance(refused, dict) else None,
                   stages=tuple(s for s in stages if s is not None))
