"""Trace replay: requests from a Mooncake-format trace, arriving open-loop at its timestamps.

One JSON object a line (``../shared/data/traces``)::

    {"timestamp": 0, "input_length": 6755, "output_length": 500, "hash_ids": [0, 1, ...]}

``timestamp`` is in milliseconds; ``hash_ids`` names each 512-token block of the prompt - equal
ids are the same prefix block. Each block's tokens are derived from its id alone (a generator
seeded by the id), so equal ids give equal tokens and therefore equal chained block hashes at any
block size that divides 512. A malformed line is reported with its line number: skipped with a
count (``on_bad_line="skip"``) or the end of the run before it starts (``"fail"``).
"""

from __future__ import annotations

import asyncio
import functools
import json
import random
from array import array
from collections.abc import Sequence
from dataclasses import dataclass

from wavepp.runtime.arrivals import ArrivalPort, ClosedLoop
from wavepp.runtime.clock import now
from wavepp.runtime.kvcache.hashing import ROOT_HASH, block_hashes, random_tokens
from wavepp.runtime.request import Request, cdiv

TRACE_BLOCK_TOKENS = 512
# Trace blocks whose tokens, and whose KV block hashes under each parent, a replay remembers: the most
# recently used (a popular prefix is generated and hashed once). Bounded, so a replay's memory does not
# grow with the trace: the 3,993-row Mooncake trace names 43,924 distinct blocks (~2.2 KB of tokens each,
# 92 MB unbounded). Making its requests took 1.0 s unbounded, 1.25 s at this cap (~40 MB), 1.94 s at 4,096.
TRACE_BLOCK_MEMO = 16384
BAD_LINE_MODES = ("skip", "fail")


class TraceError(ValueError):
    """A trace that cannot be replayed: unreadable, a malformed line (with ``on_bad_line=fail``), or empty."""


@dataclass(frozen=True, slots=True)
class TraceRow:
    line: int
    arrival_s: float
    input_length: int
    hash_ids: Sequence[int]       # an array('q') read from a file; a tuple built in memory


@dataclass(frozen=True, slots=True)
class Trace:
    path: str
    rows: list[TraceRow]
    skipped: int = 0
    first_skip: str = ""          # the first skipped line's reason, for the one-line warning
    block_tokens: int = TRACE_BLOCK_TOKENS   # tokens each hash id names (a file trace: 512)
    primed: tuple[tuple[int, ...], ...] = ()  # hash-id chains already cached when the replay starts


def _row(obj: object, line: int) -> TraceRow:
    """A row's hash ids are 8 bytes each in an ``array('q')``: a tuple of ints held an int object a distinct
    id (~1 KB a row of a Mooncake trace, with the table that shared them between rows)."""
    if not isinstance(obj, dict):
        raise ValueError("not a JSON object")
    ts, n, ids = obj.get("timestamp"), obj.get("input_length"), obj.get("hash_ids")
    if isinstance(ts, bool) or not isinstance(ts, int | float) or not ts >= 0 or ts == float("inf"):
        raise ValueError(f"timestamp must be a number of milliseconds >= 0, got {ts!r:.40}")
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"input_length must be a positive integer, got {n!r:.40}")
    if not isinstance(ids, list) or not all(isinstance(i, int) and not isinstance(i, bool) and 0 <= i < 2**63
                                            for i in ids):
        raise ValueError("hash_ids must be a list of integers in [0, 2^63)")
    if len(ids) != cdiv(n, TRACE_BLOCK_TOKENS):
        raise ValueError(f"{len(ids)} hash_ids for {n} tokens (expected one per {TRACE_BLOCK_TOKENS}-token block)")
    return TraceRow(line, ts / 1000.0, n, array("q", ids))


def load_trace(path: str, on_bad_line: str = "fail", limit: int | None = None) -> Trace:
    """Parse a trace; rows sorted by arrival. TraceError names the file and line."""
    if on_bad_line not in BAD_LINE_MODES:
        raise TraceError(f"--on-bad-line must be one of {', '.join(BAD_LINE_MODES)}, got {on_bad_line!r}")
    rows: list[TraceRow] = []
    skipped, first = 0, ""
    try:
        with open(path) as lines:          # a line at a time: a trace of 100,000 rows is ~30 MB of text
            for lineno, raw in enumerate(lines, 1):
                if not raw.strip():
                    continue
                try:
                    rows.append(_row(json.loads(raw), lineno))
                except ValueError as exc:          # json.JSONDecodeError is a ValueError
                    why = f"{path}:{lineno}: {str(exc).splitlines()[0][:160]}"
                    if on_bad_line == "fail":
                        raise TraceError(f"{why} (--on-bad-line skip to replay the rest)") from None
                    skipped += 1
                    first = first or why
                if limit is not None and len(rows) >= limit:
                    break
    except (OSError, UnicodeDecodeError) as exc:
        raise TraceError(f"cannot read trace {path!r}: {exc.strerror if isinstance(exc, OSError) else exc}") from None
    if not rows:
        note = f" ({skipped} skipped, e.g. {first})" if skipped else ""
        raise TraceError(f"trace {path!r} has no valid line{note}")
    rows.sort(key=lambda r: (r.arrival_s, r.line))
    return Trace(path, rows, skipped, first)


class TraceWorkload(ClosedLoop):
    """Requests of a trace, in arrival order, with their arrival offsets (open loop).

    ``speed`` replays the trace that many times faster (offsets divided by it). A trace built in
    memory (a what-if replay of a run's arrivals, :mod:`runtime.whatif.preview`) may name its hash ids per
    KV block (``block_tokens``) and prefixes to compute before the first arrival (``primed``).

    ``open_loop=False`` (the replay of a closed-loop run): the offsets are ignored and the requests
    arrive as a closed loop's do, the next one as one finishes (the loop's own closed-loop path,
    as the run's generator did: the order in which an arrival, an admission round and the next
    wave's plan run after a wave retires is the run's)."""

    def __init__(self, trace: Trace, block_size: int, vocab_size: int, extra: bytes = b"",
                 speed: float = 1.0, open_loop: bool = True) -> None:
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
        # Bounded memos of pure functions (TRACE_BLOCK_MEMO): a block forgotten is made again, the same.
        self._block = functools.lru_cache(maxsize=TRACE_BLOCK_MEMO)(self._make_block)
        self._hashed = functools.lru_cache(maxsize=TRACE_BLOCK_MEMO)(self._hash_block)

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
                await asyncio.sleep(delay)
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
        ids = {h for row in self.trace.rows[: self.issued] for h in row.hash_ids}
        return len(ids) * self.trace.block_tokens

    def arrival_offset(self, i: int) -> float:
        """Seconds after the first arrival at which request ``i`` arrives."""
        rows = self.trace.rows
        return (rows[i].arrival_s - rows[0].arrival_s) / self.speed

    def primed_prompts(self) -> list[tuple[array[int], list[int]]]:
        """A file trace starts from cold caches (reuse builds up as in the trace); an in-memory one
        may name prefixes that were cached before its first arrival."""
        out = []
        for ids in self.trace.primed:
            tokens = self._tokens(ids, len(ids) * self.trace.block_tokens)
            out.append((tokens, block_hashes(tokens, self.block_size, self.extra)))
        return out

    def _make_block(self, hash_id: int) -> array[int]:
        """The tokens of trace block ``hash_id``: from a generator seeded by the id alone."""
        return random_tokens(random.Random(hash_id), self.trace.block_tokens, self.vocab_size)

    def _hash_block(self, parent: int, hash_id: int) -> list[int]:
        """The KV block hashes of trace block ``hash_id`` after the prefix whose last hash is ``parent``."""
        return block_hashes(self._block(hash_id), self.block_size, self.extra, parent)

    def _tokens(self, hash_ids: Sequence[int], length: int) -> array[int]:
        tokens = array("I")
        for h in hash_ids:
            tokens.extend(self._block(h))
        del tokens[length:]
        return tokens

    def next_request(self, now: float) -> Request:
        i = self.issued
        self.issued += 1
        row = self.trace.rows[i]
        tokens = self._tokens(row.hash_ids, row.input_length)
        group = f"h{row.hash_ids[0]}" if row.hash_ids else "cold"
        return Request(f"t{row.line:06d}", tokens, now, self._hashes(row.hash_ids, tokens), group)

    def _hashes(self, hash_ids: Sequence[int], tokens: array[int]) -> list[int]:
        """``block_hashes(tokens)``, each whole trace block's KV block hashes remembered by (parent hash,
        hash id): a prefix many requests share is hashed once, as a workload generator hashes only a
        prompt's new suffix (the arrival's CPU cost, which a real-time loop pays, is the run's)."""
        size = self.trace.block_tokens
        out: list[int] = []
        parent = ROOT_HASH
        whole = len(tokens) // size
        for h in hash_ids[:whole]:
            hashes = self._hashed(parent, h)
            out += hashes
            parent = hashes[-1]
        return out + block_hashes(tokens[whole * size:], self.block_size, self.extra, parent)
