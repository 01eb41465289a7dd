"""Trace replay: requests from a Mooncake-format trace (:mod:`runtime.sources.trace_file`), arriving open-loop
at its timestamps.

Each block's tokens are derived from its hash id alone (:mod:`runtime.sources.trace_prompts`), so equal ids
give equal tokens and therefore equal chained block hashes at any block size that divides 512.
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence

import numpy as np

from wavepp.runtime.arrivals import ArrivalPort, ClosedLoop
from wavepp.runtime.clock import now, sleep
from wavepp.runtime.kvcache.hashing import block_hashes
from wavepp.runtime.request import Request
from wavepp.runtime.sources.prompt_worker import PromptWorker
from wavepp.runtime.sources.trace_file import FileRows, Trace, TraceError
from wavepp.runtime.sources.trace_prompts import TracePrompts

# Hash ids of issued requests gathered before they are folded into the sorted distinct ones (8 MB).
DISTINCT_FOLD_IDS = 1 << 20


class DistinctIds:
    """How many distinct ids were added: a sorted array of the distinct ones (8 bytes each) and the ids added
    since the last fold. A set of Python ints took ~70 bytes an id; the Mooncake trace names 11 new ids a row."""

    def __init__(self) -> None:
        self._distinct = np.empty(0, np.int64)
        self._pending = array("q")

    def add(self, ids: Sequence[int]) -> None:
        self._pending.extend(ids)
        if len(self._pending) >= DISTINCT_FOLD_IDS:
            self._fold()

    def __len__(self) -> int:
        self._fold()
        return len(self._distinct)

    def _fold(self) -> None:
        if self._pending:
            self._distinct = np.union1d(self._distinct, np.frombuffer(self._pending, np.int64))
            self._pending = array("q")


class TraceWorkload(ClosedLoop):
    """Requests of a trace, in arrival order, with their arrival offsets (open loop).

    ``speed`` replays the trace that many times faster (offsets divided by it). A trace built in
    memory (a what-if replay of a run's arrivals, :mod:`runtime.whatif.preview`) may name its hash ids per
    KV block (``block_tokens``) and prefixes to compute before the first arrival (``primed``).

    ``open_loop=False`` (the replay of a closed-loop run): the offsets are ignored and the requests
    arrive as a closed loop's do, the next one as one finishes (the loop's own closed-loop path,
    as the run's generator did: the order in which an arrival, an admission round and the next
    wave's plan run after a wave retires is the run's).

    ``prefetch=True`` (a file trace): a helper process makes the prompts a few rows ahead
    (:mod:`runtime.sources.prompt_worker`), the same ones this process would make."""

    def __init__(self, trace: Trace, block_size: int, vocab_size: int, extra: bytes = b"",
                 speed: float = 1.0, open_loop: bool = True, prefetch: bool = False) -> None:
        if trace.block_tokens % block_size:
            raise TraceError(f"the block size {block_size} must divide the trace's {trace.block_tokens}-token blocks")
        if not speed > 0:
            raise TraceError(f"trace speed must be > 0, got {speed}")
        self.trace = trace
        self.block_size = block_size
        self.vocab_size = vocab_size
        self.extra = extra
        self.speed = speed
        self.open_loop = open_loop     # a replay of a closed-loop run: False
        self.num_requests = len(trace.rows)
        self.issued = 0
        self._first_arrival_s = trace.rows[0].arrival_s if trace.rows else 0.0
        self._ids_issued = DistinctIds()       # the working set, counted as requests are made
        self.prompts = TracePrompts(trace.block_tokens, block_size, vocab_size, extra)
        # A file trace's prompts made ahead by a helper process (prefetch=True), else here.
        self.worker = (PromptWorker(trace.path, self.num_requests, self.prompts)
                       if prefetch and isinstance(trace.rows, FileRows) else None)

    @property
    def exhausted(self) -> bool:
        return self.issued >= self.num_requests

    async def arrivals(self, port: ArrivalPort) -> None:
        """Open loop: requests arrive at the trace's offsets, with at most ``concurrency`` outstanding
        (a client's max concurrency; 0: no cap): one that would exceed it arrives when a request finishes."""
        if not self.open_loop:
            await super().arrivals(port)
            return
        start = now()
        while not self.exhausted:
            delay = start + self.arrival_offset(self.issued) - now()
            if delay > 0:
                await sleep(delay)
            if port.concurrency and self.issued - port.finished >= port.concurrency:
                self.held_by_cap += 1
                while self.issued - port.finished >= port.concurrency:
                    await port.run.changed.wait()
            port.arrive(self.next_request(now()))
        await port.done.wait()              # a task of the run: returning would end it

    def ended(self, port: ArrivalPort) -> None:
        if self.open_loop:
            port.run.changed.notify()       # a slot under the concurrency cap is free
        else:
            super().ended(port)

    def working_set_tokens(self) -> int:
        """Distinct tokens of the trace blocks the requests issued so far named."""
        return len(self._ids_issued) * self.trace.block_tokens

    def arrival_offset(self, i: int) -> float:
        """Seconds after the first arrival at which request ``i`` arrives."""
        return (self.trace.rows[i].arrival_s - self._first_arrival_s) / self.speed

    def primed_prompts(self) -> list[tuple[array[int], list[int]]]:
        """A file trace starts from cold caches (reuse builds up as in the trace); an in-memory one
        may name prefixes that were cached before its first arrival."""
        out = []
        for ids in self.trace.primed:
            tokens = self.prompts.tokens(ids, len(ids) * self.trace.block_tokens)
            out.append((tokens, block_hashes(tokens, self.block_size, self.extra)))
        return out

    def next_request(self, now: float) -> Request:
        i = self.issued
        self.issued += 1
        row = self.trace.rows[i]
        self._ids_issued.add(row.hash_ids)
        made = self.worker.prompt(i, row.hash_ids, row.input_length) if self.worker is not None else None
        tokens, hashes = made or self.prompts.prompt(row.hash_ids, row.input_length)
        group = f"h{row.hash_ids[0]}" if row.hash_ids else "cold"
        return Request(f"t{row.line:06d}", tokens, now, hashes, group)
