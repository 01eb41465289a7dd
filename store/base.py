"""The ``Store`` protocol: the shared state of a WavePP deployment.

Implementations: :mod:`store.memory` (embedded default, one process) and :mod:`store.redis_store`
(shared by processes and hosts). Both pass one contract suite (``tests/store/test_contract.py``).
Every method is a coroutine so the two look the same to the runtime.

What it holds:

* the reuse **hint index** - per stage, a counter per resident block hash (+1 when the stage
  attaches the block, -1 when it detaches it);
* the **lease/escrow registry** - who holds pins for which request on which stages, kept alive by
  the holder's heartbeat; a dead holder's entries expire and the stages release those pins;
* **wave plans** - each wave's chunk descriptors in a capped log, plus the waves still in flight;
* the **knobs** - one versioned record of the scheduling knobs, with its history, and the
  **deployment** record (block size, stages) the running runtime publishes. The store knows no
  knob: every write brings its :class:`KnobValidator` (the runtime's schema), which checks it
  against the deployment before anything is stored, and a record that was never written holds no
  values (the reader supplies the defaults: :meth:`KnobsRecord.values_or`);
* the **run descriptions** - what each run is (engine, model, hardware, stages, workload, knobs: a
  saved run's ``meta``), published by the runtime at the run's start for viewers of the store (the
  dashboard's Preview replays a live run in the sim it describes); the newest ``RUN_META_CAP`` runs.

Entries another client corrupted (not JSON, a key of the wrong Redis type) never raise: a reader
gets them as absent with a one-line ``note``, and the next write replaces them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from wavepp.store.deployment import Deployment
from wavepp.store.records import StatusSnapshot, WavePlanRecord

# Run descriptions kept (the newest runs by id, which starts with the run's UTC start time:
# runtime.runs.runfile.RunInfo); a viewer shows a handful of recent runs.
RUN_META_CAP = 64

# The largest knobs version a write stores: 2**53 - 1, the last integer a double counts exactly (Redis
# runs Lua 5.1, whose numbers are doubles; JSON readers such as a browser's are the same). A stored
# version beyond it - or at it, which leaves no room for the next write - is another client's
# corruption: read as absent, so the next write replaces it with version 1.
KNOBS_VERSION_MAX = 2**53 - 1


class StoreError(Exception):
    """The store cannot be used (unreachable, wrong credentials, malformed URL): one line for the user."""


@dataclass(frozen=True, slots=True)
class HintResult:
    """Per stage, the longest resident prefix (in blocks); ``reuse_blocks`` is their minimum."""

    per_stage: tuple[int, ...]
    probes: int                  # membership probes the lookup made (all stages)

    @property
    def reuse_blocks(self) -> int:
        return min(self.per_stage) if self.per_stage else 0


@dataclass(frozen=True, slots=True)
class RegistryEntry:
    """Pins a holder (the admitting leader) keeps for one request."""

    request_id: str
    holder: str
    stages: tuple[int, ...]
    reuse_blocks: int
    escrow_blocks: int


@dataclass(frozen=True, slots=True)
class KnobsRecord:
    version: int                 # 0: never written, or lost (a store restarted empty): no values
    values: dict[str, Any]       # as the last write's validator returned them; {} at version 0
    deployment: Deployment | None = None   # what the running deployment fixes; None: not published
    note: str | None = None      # a corrupt entry read as absent, or replaced by this write

    def values_or(self, defaults: Mapping[str, Any]) -> dict[str, Any]:
        """The stored values, or ``defaults`` when none are stored (version 0): the knobs' defaults
        are the runtime's, the store has none of its own."""
        return self.values if self.version else dict(defaults)


class KnobValidator(Protocol):
    """How a writer checks a knob write before the store keeps it (``runtime.control.knobs.validated_values``).

    Called with the stored values (empty when none are stored), the writer's changes and the
    deployment to check against (None: none published); returns the full values to store. Raises
    the writer's own error (the runtime's ``KnobError``) naming every bad value: the store then
    writes nothing and lets that error through unchanged. It may be called more than once for one
    write (the Redis store retries a lost compare-and-set on the values it read again), so it must
    not have side effects.
    """

    def __call__(self, current: Mapping[str, Any], changes: Mapping[str, Any],
                 deployment: Deployment | None, /) -> dict[str, Any]: ...


class Store(Protocol):
    # ---- hint index ------------------------------------------------------------------------
    async def hint_update(self, stage: int, attached: Sequence[int], detached: Sequence[int]) -> None:
        """Apply one stage's attach (+1) and detach (-1) events; a count never goes below zero."""
        ...

    async def hint_update_many(self, updates: Sequence[tuple[int, Sequence[int], Sequence[int]]]) -> None:
        """Several stages' events at once (one round trip on Redis)."""
        ...

    async def hint_lookup(self, prompts: Sequence[Sequence[int]], stages: Sequence[int]) -> list[HintResult]:
        """For each prompt's block hashes, the longest prefix resident on each of ``stages``
        (exponential probe + binary search; residency on a stage is prefix-closed). Each stage's search
        starts at the stage before's answer (two probes confirm it where they agree), and ``probes``
        counts them that way - the same on every store."""
        ...

    async def hint_count(self, stage: int) -> int:
        """How many hashes the index believes resident on ``stage``."""
        ...

    async def hint_clear(self) -> None:
        """Forget the whole index (before a rebuild from the stages' own trees)."""
        ...

    # ---- lease/escrow registry -------------------------------------------------------------
    async def registry_put(self, entries: Sequence[RegistryEntry], ttl_s: float) -> None:
        """Record entries (all of one holder) and (re)start that holder's heartbeat."""
        ...

    async def registry_refresh(self, holder: str, ttl_s: float) -> None:
        """The holder is alive: extend its heartbeat."""
        ...

    async def registry_drop(self, holder: str, request_ids: Sequence[str]) -> None:
        """The holder released these requests' pins."""
        ...

    async def registry_entries(self) -> list[RegistryEntry]:
        """Entries whose holder is alive."""
        ...

    async def registry_reap(self) -> list[RegistryEntry]:
        """Remove and return entries whose holder's heartbeat has expired."""
        ...

    # ---- wave plans ------------------------------------------------------------------------
    async def plan_publish(self, plan: WavePlanRecord) -> None:
        """Append a wave plan (``plan.wave`` is its id) to the capped log and mark it in flight."""
        ...

    async def plan_retire(self, wave_id: int) -> None: ...

    async def plans_recent(self, count: int) -> list[WavePlanRecord]:
        """The last ``count`` plans, oldest first."""
        ...

    async def plans_in_flight(self) -> list[WavePlanRecord]:
        """Plans published and not retired, by wave id (what a restarted stage must know)."""
        ...

    # ---- knobs -----------------------------------------------------------------------------
    async def knobs_get(self) -> KnobsRecord: ...

    async def knobs_set(self, changes: dict[str, Any], expected_version: int | None = None,
                        deployment: Deployment | None = None, *, validate: KnobValidator,
                        min_version: int = 1) -> KnobsRecord:
        """Apply ``changes`` over the current values with ``validate``, against ``deployment`` - or,
        when the writer does not have it at hand (the CLI, the dashboard), the deployment record - and
        write what it returns as a new version with its history entry (both or neither). The running
        runtime and its server pass their own deployment: the record is shared, and another client
        may have written it.

        The new version is the current one plus one, or ``min_version`` where that is higher: the
        runtime writing back a record the store lost keeps the version its clients saw, so a version
        never moves backwards for them and a stale ``expected_version`` is still refused.

        Raises whatever ``validate`` raises (``runtime.control.knobs.KnobError``: nothing written), and
        ``StoreError`` when ``expected_version`` is given and no longer current, or when the record
        changed under every one of a bounded number of compare-and-set attempts (it never spins).
        """
        ...

    async def deployment_put(self, deployment: Deployment) -> None:
        """Publish what the running deployment fixes (the runtime, at start and after a store restart)."""
        ...

    async def knobs_history(self, count: int) -> list[dict[str, Any]]:
        """The last ``count`` knob writes, oldest first: ``{"version", "time", "changes"}``."""
        ...

    # ---- runtime status ----------------------------------------------------------------------
    async def status_put(self, status: StatusSnapshot) -> None:
        """The runtime's latest status snapshot (queues, per-stage cache state); the dashboard reads it."""
        ...

    async def status_get(self) -> StatusSnapshot | None:
        """The latest snapshot (any run's); None when none was written, or the entry is corrupt."""
        ...

    # ---- run descriptions ------------------------------------------------------------------
    async def run_meta_put(self, run_id: str, meta: dict[str, Any]) -> None:
        """Publish what run ``run_id`` is (a saved run's ``meta``: JSON values) when it starts; only
        the newest ``RUN_META_CAP`` run ids are kept."""
        ...

    async def run_meta_get(self, run_id: str) -> dict[str, Any] | None:
        """The description run ``run_id`` published, as JSON reads it back; None when it published
        none (an older runtime), it was trimmed, or the entry is corrupt (reported once)."""
        ...

    # ---- the autopilot's settings -----------------------------------------------------------
    async def autopilot_put(self, record: dict[str, Any]) -> None:
        """Write the autopilot's settings (``runtime.autopilot.settings``, JSON values) whole: the
        operator's mode, bounds and freeze, and the runtime's own freeze on an operator's knob write."""
        ...

    async def autopilot_get(self) -> dict[str, Any] | None:
        """The autopilot's settings as last written; None when none were or the entry is not a JSON
        object (the reader validates the fields)."""
        ...

    async def clear_all(self, keep_knobs: bool = False) -> int:
        """Delete everything this store holds for the deployment (tests, fresh benchmark runs); with
        ``keep_knobs`` the knobs, their history and the autopilot's settings stay (a bench on a live
        deployment's store must not reset the operator's knobs). Run descriptions stay too: like the span stream, each
        carries its run's id and describes runs a viewer may still show. Returns how many records
        were deleted."""
        ...

    async def close(self) -> None: ...
