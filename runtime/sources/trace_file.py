"""Reading a Mooncake-format trace file: every line checked up front, the rows read again as they are replayed.

One JSON object a line (``../shared/data/traces``)::

    {"timestamp": 0, "input_length": 6755, "output_length": 500, "hash_ids": [0, 1, ...]}

``timestamp`` is in milliseconds; ``hash_ids`` names each 512-token block of the prompt - equal
ids are the same prefix block. A malformed line is reported with its line number: skipped with a
count (``on_bad_line="skip"``) or the end of the run before it starts (``"fail"``).

A replay's memory must not grow with its trace, so a file's rows are not held: :func:`load_trace`
reads the file once to check every line and keeps, per valid row, its arrival, line number and
byte offset (24 bytes; a row held as objects took ~0.8 KB on the Mooncake trace, ~280 B in columns).
:class:`FileRows` reads a row again, a block of rows at a time, when the replay reaches it. A file
changed between the check and the replay ends the replay with a :class:`TraceError`.
"""

from __future__ import annotations

import json
import os
import stat
from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeVar, overload

import numpy as np

from wavepp.runtime.request import cdiv

TRACE_BLOCK_TOKENS = 512
BAD_LINE_MODES = ("skip", "fail")
# Rows a FileRows parses at one opening of the file: a replay reads them in order, so one opening and
# one block of parsed rows (~0.2 MB on the Mooncake trace) serve this many requests.
READ_AHEAD_ROWS = 256

_N = TypeVar("_N", int, float)


class TraceError(ValueError):
    """A trace that cannot be replayed: unreadable, a malformed line (with ``on_bad_line=fail``), empty,
    or changed on disk while it was replayed."""


@dataclass(frozen=True, slots=True)
class TraceRow:
    line: int
    arrival_s: float
    input_length: int
    hash_ids: Sequence[int]       # an array('q') read from a file; a tuple built in memory


@dataclass(frozen=True, slots=True)
class Trace:
    path: str
    rows: Sequence[TraceRow]      # FileRows for a file (read as replayed); a list built in memory
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


class FileRows(Sequence[TraceRow]):
    """The valid rows of a trace file in arrival order (ties in line order), each parsed from the file
    when asked for. Holds the index (arrival, line, byte offset a row) and one block of parsed rows."""

    def __init__(self, path: str, arrivals: array[float], lines: array[int], offsets: array[int],
                 stamp: tuple[int, int, int, int]) -> None:
        self.path = path
        self._arrivals, self._lines, self._offsets = arrivals, lines, offsets
        self._stamp = stamp               # _stamp(the file) when it was checked
        self._block_start = -1
        self._block: list[TraceRow] = []

    def __len__(self) -> int:
        return len(self._offsets)

    @overload
    def __getitem__(self, i: int) -> TraceRow: ...
    @overload
    def __getitem__(self, i: slice) -> list[TraceRow]: ...

    def __getitem__(self, i: int | slice) -> TraceRow | list[TraceRow]:
        if isinstance(i, slice):
            return [self[k] for k in range(*i.indices(len(self)))]
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError(f"trace row {i} of {len(self)}")
        if not self._block_start <= i < self._block_start + len(self._block):
            self._read_block(i - i % READ_AHEAD_ROWS)
        return self._block[i - self._block_start]

    def _read_block(self, start: int) -> None:
        self._block_start, self._block = -1, []          # a failed read leaves nothing half-made
        end = min(start + READ_AHEAD_ROWS, len(self))
        block: list[TraceRow] = []
        try:
            with open(self.path, "rb") as f:
                st = os.fstat(f.fileno())
                if _stamp(st) != self._stamp:
                    raise TraceError(f"trace {self.path!r} changed on disk while it was replayed: replay it again")
                for k in range(start, end):
                    f.seek(self._offsets[k])
                    block.append(self._reread(f.readline(), k))
        except OSError as exc:
            raise TraceError(f"cannot read trace {self.path!r} again while replaying it: {exc.strerror}") from None
        self._block_start, self._block = start, block

    def _reread(self, raw: bytes, k: int) -> TraceRow:
        line = self._lines[k]
        try:
            row = _row(json.loads(raw), line)
        except ValueError:
            row = None
        if row is None or row.arrival_s != self._arrivals[k]:
            raise TraceError(f"{self.path}:{line}: the line changed while the trace was replayed: replay it again")
        return row


def _stamp(st: os.stat_result) -> tuple[int, int, int, int]:
    """What says a trace file is the one that was checked: the same file (device, inode: not another one
    renamed over it, as an editor saves or ``mv`` replaces), of the same size and modification time. An
    edit that keeps all four is caught where it changes a row's arrival (:meth:`FileRows._reread`)."""
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns


def _in_order(a: array[_N], order: np.ndarray) -> array[_N]:
    out = a[:0]                                   # empty, of the same type
    out.frombytes(np.frombuffer(a, a.typecode)[order].tobytes())
    return out


def load_trace(path: str, on_bad_line: str = "fail", limit: int | None = None) -> Trace:
    """Check a trace file's lines (up to ``limit`` valid rows); its rows in arrival order, read as replayed.
    TraceError names the file and line."""
    if on_bad_line not in BAD_LINE_MODES:
        raise TraceError(f"--on-bad-line must be one of {', '.join(BAD_LINE_MODES)}, got {on_bad_line!r}")
    arrivals, lines, offsets = array("d"), array("q"), array("q")
    skipped, first = 0, ""
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):     # before opening: a FIFO's open waits for a writer
            raise TraceError(f"trace {path!r} is not a regular file: a replay reads it again (each run, and "
                             "its rows as replayed); write it to a file first")
        with open(path, "rb") as f:     # a line at a time: a trace of 100,000 rows is ~30 MB of text
            st = os.fstat(f.fileno())
            offset = 0
            for lineno, raw in enumerate(f, 1):
                at, offset = offset, offset + len(raw)
                if not raw.strip():
                    continue
                try:
                    row = _row(json.loads(raw), lineno)   # bytes: json decodes UTF-8 and says where it is not
                except ValueError as exc:          # json.JSONDecodeError and UnicodeDecodeError are ValueErrors
                    why = f"{path}:{lineno}: {str(exc).splitlines()[0][:160]}"
                    if on_bad_line == "fail":
                        raise TraceError(f"{why} (--on-bad-line skip to replay the rest)") from None
                    skipped += 1
                    first = first or why
                    continue
                arrivals.append(row.arrival_s)
                lines.append(lineno)
                offsets.append(at)
                if limit is not None and len(offsets) >= limit:
                    break
    except OSError as exc:
        raise TraceError(f"cannot read trace {path!r}: {exc.strerror}") from None
    if not offsets:
        note = f" ({skipped} skipped, e.g. {first})" if skipped else ""
        raise TraceError(f"trace {path!r} has no valid line{note}")
    if any(arrivals[k] < arrivals[k - 1] for k in range(1, len(arrivals))):
        # Arrival order, ties in line order (lexsort's last key is its first; the sort is stable).
        order = np.lexsort((np.frombuffer(lines, np.int64), np.frombuffer(arrivals, np.float64)))
        arrivals, lines, offsets = _in_order(arrivals, order), _in_order(lines, order), _in_order(offsets, order)
    return Trace(path, FileRows(path, arrivals, lines, offsets, _stamp(st)), skipped, first)
