"""Iteration: what each turn of the loop does around planning - how many waves may be in flight
(``ring``), whether a small wave waits to fill (``fill``), whether new requests are relayed down
the chain before the stages can run them (``relay``), and how a ring slot reopens after the last
stage (``return``). Each is a hook the loop calls the same way whatever the variant."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from wavepp.runtime.mechanisms.ports import LastStage, RunView, WaveSettings
from wavepp.runtime.registry import Registry


# ---- ring: waves in flight --------------------------------------------------------------------
class RingSize(Protocol):
    @property
    def name(self) -> str: ...

    def size(self, knobs: WaveSettings, num_stages: int) -> int:
        """Waves in flight: the ``ring`` knob when set, else the policy's own."""
        ...


RING = Registry[RingSize]("ring", doc="waves in flight")


@dataclass(frozen=True, slots=True)
class Ring:
    """``factor``·P waves in flight unless the ``ring`` knob says otherwise. WavePP: R = 2P
    (DESIGN §2). TensorRT-LLM: ``num_micro_batches = pp_size`` in ``_executor_loop_pp``
    (PRs #3878, #10349, #16170), so R = P."""

    factor: int

    @property
    def name(self) -> str:
        return f"{self.factor}P" if self.factor != 1 else "P"

    def size(self, knobs: WaveSettings, num_stages: int) -> int:
        return knobs.ring if knobs.ring > 0 else self.factor * num_stages


RING.register(Ring(2))
RING.register(Ring(1))


# ---- fill: does a small wave wait for more work ----------------------------------------------
class Fill(Protocol):
    @property
    def name(self) -> str: ...

    def should_wait(self, run: RunView, num_stages: int, min_wave_tokens: int) -> bool:
        """Whether the dispatcher waits for more admitted work instead of planning a wave now."""
        ...


FILL = Registry[Fill]("fill", doc="whether a small wave waits for more admitted work")


@FILL.register
@dataclass(frozen=True, slots=True)
class FillToMinimum:
    """WavePP: a wave smaller than b_min waits for more admitted work (a wave costs a fixed overhead per
    stage, so many small waves would waste it) while

    * stage 0 has a wave to run after the one it is running: it will not idle before it takes that one,
      and a wave planned then carries what arrived meanwhile. A closed loop's requests return in the
      group their wave finished in, a moment after the wave left the last stage; a fragment planned as
      soon as a ring slot frees takes the slot the returning group would fill, and keeps circulating
      as a wave of its own;
    * or P waves keep every stage busy and more work is on its way (arrived or being admitted).

    The dispatcher wakes again on every admission, retirement and, while it waits here, every wave
    stage 0 finishes; it sends what it has once neither holds."""

    name: str = "on"

    def should_wait(self, run: RunView, num_stages: int, min_wave_tokens: int) -> bool:
        if not 0 < run.unscheduled_tokens() < min_wave_tokens:
            return False
        if run.first_stage_backlog >= 2:
            return True
        if run.in_flight < num_stages:
            return False
        return bool(run.num_waiting or run.admitting)     # else no more work is on its way: waiting would idle stage 0


@FILL.register
@dataclass(frozen=True, slots=True)
class NoFill:
    """TensorRT-LLM's loop schedules each iteration with whatever is there."""

    name: str = "off"

    def should_wait(self, run: RunView, num_stages: int, min_wave_tokens: int) -> bool:
        return False


# ---- relay: new requests sent rank to rank ----------------------------------------------------
class Relay(Protocol):
    @property
    def name(self) -> str: ...

    def relayed_tokens(self, admitted_tokens: int) -> int:
        """Token ids the stages receive with a wave whose plan admitted ``admitted_tokens``."""
        ...


RELAY = Registry[Relay]("relay", doc="whether new requests are relayed down the chain")


@RELAY.register
@dataclass(frozen=True, slots=True)
class RelayRequests:
    """Newly admitted requests, with their token ids, are relayed rank to rank before the later
    stages can run them (TensorRT-LLM: ``RequestBroadcaster._broadcast_requests``, pickled per
    hop; cost per token from PR #15134)."""

    name: str = "on"

    def relayed_tokens(self, admitted_tokens: int) -> int:
        return admitted_tokens


@RELAY.register
@dataclass(frozen=True, slots=True)
class PlansFromStore:
    """WavePP: stages read plans from the store; nothing travels down the chain."""

    name: str = "off"

    def relayed_tokens(self, admitted_tokens: int) -> int:
        return 0


# ---- return: how a ring slot reopens ---------------------------------------------------------
class ReturnPath(Protocol):
    @property
    def name(self) -> str: ...

    async def after_last_stage(self, last: LastStage) -> None:
        """What happens between the last stage running a wave and its ring slot reopening."""
        ...


RETURN = Registry[ReturnPath]("return", field="return_path", doc="how a ring slot reopens after the last stage")


@RETURN.register
@dataclass(frozen=True, slots=True)
class DirectReturn:
    """WavePP: the leader retires the wave as soon as the last stage has run it."""

    name: str = "direct"

    async def after_last_stage(self, last: LastStage) -> None:
        return None


@RETURN.register
@dataclass(frozen=True, slots=True)
class SampleStateRing:
    """TensorRT-LLM: the last rank synchronizes its sampler (``sampler_event.synchronize()``) and
    its sample state travels back to rank 0 over the reverse ring (``_ring_broadcast_sample_state``,
    (n-1) -> 0 -> ...; ``recv_object`` on rank 0; PRs #3878, #10349, #16170) before rank 0 handles
    the finished batch and can schedule into the slot: one more stage message per wave."""

    name: str = "ring"

    async def after_last_stage(self, last: LastStage) -> None:
        await last.return_sample_state()
