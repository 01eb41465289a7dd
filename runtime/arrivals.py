"""Arrivals: where a run's requests come from, behind one protocol.

A source is a synthetic workload (:class:`runtime.sources.workloads.Workload`: closed loop at a
concurrency), a trace (:class:`runtime.sources.traces.TraceWorkload`: open loop at its timestamps, or
closed), or a server's clients (:class:`runtime.sources.server.ServerSource`). The loop runs the
source's :meth:`ArrivalSource.arrivals` as one of its tasks and calls :meth:`ArrivalSource.ended`
when a request ends; it never asks which kind of source it holds.
"""

from __future__ import annotations

import asyncio
from array import array
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from wavepp.runtime.clock import now
from wavepp.runtime.completion import RequestEnds
from wavepp.runtime.request import Request
from wavepp.runtime.run_state import RunState


@dataclass(frozen=True, slots=True)
class ArrivalPort:
    """What a request source sees of the loop: its arrival path (span, limits, the waiting line),
    the run state, where requests end, how many requests may be outstanding and how many ended
    (``finished``), and the run's end (``done``); ``failures``: the run's failure record (a server
    keeps none past the answer)."""

    arrive: Callable[[Request], None]
    run: RunState
    ends: RequestEnds
    failures: dict[str, str]
    concurrency: int
    done: asyncio.Event

    @property
    def finished(self) -> int:
        return self.run.num_ended


class ArrivalSource(Protocol):
    @property
    def num_requests(self) -> int: ...
    @property
    def open_loop(self) -> bool: ...
    @property
    def exhausted(self) -> bool: ...
    @property
    def held_by_cap(self) -> int:
        """Arrivals of an open loop a concurrency cap held back so far: while it binds, arrivals follow
        completions and their rate is not the workload's (0 for a closed loop and an uncapped one)."""
        ...

    def primed_prompts(self) -> list[tuple[array[int], list[int]]]:
        """Prefixes to compute into the caches before the measured arrivals: (tokens, block hashes)."""
        ...

    def next_request(self, now: float) -> Request: ...

    def working_set_tokens(self) -> int:
        """Distinct tokens of the shared prefixes the requests issued so far used (0: none to speak of)."""
        ...

    async def arrivals(self, port: ArrivalPort) -> None:
        """A task of the loop: bring the requests in; never returns before ``port.done``."""
        ...

    def ended(self, port: ArrivalPort) -> None:
        """A request ended (the run is not over): a closed loop brings the next one."""
        ...


class ClosedLoop:
    """Arrivals of a closed loop: ``concurrency`` requests at once, the next one as one ends."""

    num_requests: int
    open_loop = False
    held_by_cap = 0

    @property
    def exhausted(self) -> bool:
        raise NotImplementedError

    def next_request(self, now: float) -> Request:
        raise NotImplementedError

    async def arrivals(self, port: ArrivalPort) -> None:
        for _ in range(min(port.concurrency, self.num_requests)):
            port.arrive(self.next_request(now()))
        await port.done.wait()

    def ended(self, port: ArrivalPort) -> None:
        if self.exhausted:
            port.run.changed.notify()
        else:       # drawn now, handled on the next turn: not recursive when many fail at once
            asyncio.get_running_loop().call_soon(port.arrive, self.next_request(now()))
