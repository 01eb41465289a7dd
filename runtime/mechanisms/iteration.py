"""Iteration: what each turn of the loop does around planning - how many waves may be in
flight (the ring), whether a small wave waits to fill, whether new requests are relayed down
the chain before the stages can run them."""

from __future__ import annotations

from dataclasses import dataclass

from wavepp.runtime.knobs import Knobs


@dataclass(frozen=True, slots=True)
class Ring:
    """``factor``·P waves in flight unless the ``ring`` knob says otherwise. WavePP: R = 2P
    (DESIGN §2). TensorRT-LLM: ``num_micro_batches = pp_size`` in ``_executor_loop_pp``
    (PRs #3878, #10349, #16170), so R = P."""

    factor: int

    @property
    def name(self) -> str:
        return f"{self.factor}P" if self.factor != 1 else "P"

    def size(self, knobs: Knobs, num_stages: int) -> int:
        return knobs.ring_size(num_stages, self.factor)


@dataclass(frozen=True, slots=True)
class FillWaves:
    """``on``: a wave smaller than b_min waits for more admitted work while P waves keep every
    stage busy and more work is on its way (WavePP). ``off``: schedule every iteration with
    whatever is there (TensorRT-LLM's loop schedules each iteration)."""

    on: bool

    @property
    def name(self) -> str:
        return "on" if self.on else "off"


@dataclass(frozen=True, slots=True)
class RequestRelay:
    """``on``: newly admitted requests, with their token ids, are relayed rank to rank before
    the later stages can run them (TensorRT-LLM: ``RequestBroadcaster._broadcast_requests``,
    pickled per hop; cost per token from PR #15134). ``off``: stages read plans from the store."""

    on: bool

    @property
    def name(self) -> str:
        return "on" if self.on else "off"


@dataclass(frozen=True, slots=True)
class ReturnPath:
    """How a ring slot reopens after a wave leaves the last stage.

    ``direct`` (WavePP): the leader retires the wave as soon as the last stage has run it.
    ``ring`` (TensorRT-LLM): the last rank synchronizes its sampler (``sampler_event.synchronize()``)
    and its sample state travels back to rank 0 over the reverse ring (``_ring_broadcast_sample_state``,
    (n-1) -> 0 -> ...; ``recv_object`` on rank 0; PRs #3878, #10349, #16170) before rank 0 handles
    the finished batch and can schedule into the slot: one more stage message per wave."""

    ring: bool

    @property
    def name(self) -> str:
        return "ring" if self.ring else "direct"

