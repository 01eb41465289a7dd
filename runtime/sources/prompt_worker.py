"""A trace file's prompts made ahead in a helper process, so the replay's own process only reads them.

Making a trace row's prompt (tokens from generators seeded by its hash ids, chained blake2b hashes over
them: :mod:`runtime.sources.trace_prompts`) is the load generator's work, a separate process in any real
deployment; in a sim replay it ran on the loop's process, about a tenth of a Mooncake replay's wall time,
while the machine's other core idled. Here a helper process reads the same trace file and makes the rows'
prompts in order, a few ahead of the replay (:data:`AHEAD`), with the same code - the same tokens and hashes.

The protocol, on the helper's standard streams:

* the replay writes one line of settings (``ROWS BLOCK_SIZE VOCAB EXTRA_HEX``), then one byte a prompt it
  wants (credit), keeping :data:`AHEAD` asked for;
* the helper answers, per row in order, a header (``<QIII``: row index, CRC-32 of the row's hash ids as
  ``int64`` bytes, token count, hash count), the tokens (``uint32``) and the hashes (``uint64``).

The replay checks each answer against its own row (index, hash ids, length, hash count). A helper that
cannot start, dies, answers for another row (a trace file changed under it) or owes an answer longer than
:data:`ANSWER_WAIT_S` is dropped with one warning, and the replay makes the rest of the prompts in its own
process from there: a run never depends on the helper.

``python -m wavepp.runtime.sources.prompt_worker PATH`` runs the helper. It starts (imports, the trace's
index) before it is told its settings, so a bench can start it first thing (:func:`prestart`: ~0.1 s of
start-up then runs beside the bench's own) and hand it to the replay once that is set up.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import logging
import os
import select
import struct
import subprocess
import sys
import weakref
import zlib
from array import array
from collections.abc import Sequence
from typing import IO

from wavepp.runtime.sources.trace_prompts import TracePrompts

log = logging.getLogger(__name__)

# Prompts asked for ahead of the replay: enough to hide a row the helper makes slowly (a cold prompt of new
# blocks) and a burst of arrivals at one instant (up to 26 in dynamo's Mooncake sample, where 8 ahead had
# its replay wait ~0.1 s for the helper over ~160 waits). What waits in the pipe is bounded by the pipe
# (PIPE_BYTES: the helper blocks writing when it is full), not by this (a Mooncake prompt is ~60 KB of tokens).
AHEAD = 64
# How long the replay waits for an answer the helper owes before dropping it (a row takes it milliseconds;
# a helper stopped or stuck must not stop the replay), and how long a helper whose input closed may take to
# exit before it is killed.
ANSWER_WAIT_S = 30.0
STOP_WAIT_S = 2.0
# The answers' pipe is made this large where the system allows (Linux's default is 64 KB, ~one Mooncake
# prompt); a read takes what is there, up to READ_BYTES, and waits (select) only when nothing is. System calls
# are dear here: a wait before every read of a frame's three parts cost the Mooncake replay ~0.4 s (5 pairs).
PIPE_BYTES = 1 << 20
READ_BYTES = 1 << 20
F_SETPIPE_SZ = getattr(fcntl, "F_SETPIPE_SZ", 1031)
_HEADER = struct.Struct("<QIII")
_ENDIAN_OK = sys.byteorder == "little"      # the frames' arrays are the machine's own order, little-endian


def ids_crc(hash_ids: Sequence[int]) -> int:
    """A row's hash ids as the helper and the replay both digest them."""
    return zlib.crc32(array("q", hash_ids).tobytes())


class PromptWorker:
    """The replay's end: prompts of a file trace's rows, asked for in row order (:meth:`prompt`); ``None``
    where the helper cannot serve, after which the caller makes its prompts itself."""

    def __init__(self, path: str, rows: int, prompts: TracePrompts) -> None:
        self.rows = rows
        self.block_size = prompts.block_size
        self.asked = 0                       # prompts asked for (credits sent)
        self.failure = ""                    # why the helper was dropped ("" while it serves)
        self.pid = 0                         # the helper's process id (0: none started)
        self._proc: subprocess.Popen[bytes] | None = None
        if not _ENDIAN_OK:
            self.failure = "not a little-endian machine"
            return
        try:
            self._proc = _taken_or_started(path)
        except OSError as exc:
            self.failure = f"could not start: {exc.strerror or exc}"
            return
        self.pid = self._proc.pid
        self._finalizer = weakref.finalize(self, _stop, self._proc)
        assert self._proc.stdout is not None
        self._fd = self._proc.stdout.fileno()
        os.set_blocking(self._fd, False)     # a read takes what is there; select waits, bounded (_take)
        with contextlib.suppress(OSError):   # room for the rows asked ahead: fewer, larger reads
            fcntl.fcntl(self._fd, F_SETPIPE_SZ, PIPE_BYTES)
        self._buf = bytearray()
        assert self._proc.stdin is not None
        settings = f"{rows} {prompts.block_size} {prompts.vocab_size} {prompts.extra.hex()}\n"
        try:
            self._proc.stdin.write(settings.encode())
            self._ask(min(AHEAD, rows))
        except OSError as exc:               # it ended before it was told anything (BrokenPipeError)
            self._drop(f"could not start: {exc.strerror or exc}")

    @property
    def serving(self) -> bool:
        return self._proc is not None

    def prompt(self, i: int, hash_ids: Sequence[int], length: int) -> tuple[array[int], list[int]] | None:
        """Row ``i``'s prompt as the helper made it (the rows are asked for in order), or ``None`` (the
        helper is gone, or this answer is not the row's: it is dropped)."""
        if self._proc is None:
            return None
        try:
            if self.asked < self.rows:
                self._ask(1)
            index, crc, num_tokens, num_hashes = _HEADER.unpack(self._take(_HEADER.size))
            if index != i:
                raise ValueError(f"answered row {index} for row {i}")
            if num_tokens != length or crc != ids_crc(hash_ids):
                raise ValueError(f"row {i} is not the replay's (other hash ids or length: the trace file changed?)")
            if num_hashes != num_tokens // self.block_size:
                raise ValueError(f"row {i}: {num_hashes} hashes for {num_tokens} tokens")
            tokens = array("I")
            tokens.frombytes(self._take(4 * num_tokens))
            hashes = array("Q", self._take(8 * num_hashes)).tolist()
        except (OSError, EOFError, ValueError) as exc:      # TimeoutError is an OSError
            self._drop(str(exc) or type(exc).__name__)
            return None
        if i + 1 >= self.rows:
            self.close()
        return tokens, hashes

    def close(self) -> str:
        """End the helper (idempotent); it exits as its input closes. Answers the last line it wrote to its
        error stream, if it was running."""
        if self._proc is None:
            return ""
        self._proc = None
        return str(self._finalizer() or "")

    def _take(self, n: int) -> bytes:
        """The next ``n`` bytes of the helper's answers: read as they come, as much as is there at a time,
        each wait at most :data:`ANSWER_WAIT_S`."""
        buf = self._buf
        while len(buf) < n:
            try:
                part = os.read(self._fd, max(n - len(buf), READ_BYTES))
            except BlockingIOError:
                if not select.select([self._fd], [], [], ANSWER_WAIT_S)[0]:
                    raise TimeoutError(f"no answer in {ANSWER_WAIT_S:g} s") from None
                continue
            if not part:
                raise EOFError("the helper process ended")
            buf += part
        data = bytes(buf[:n])
        del buf[:n]
        return data

    def _ask(self, n: int) -> None:
        assert self._proc is not None and self._proc.stdin is not None
        self._proc.stdin.write(b"\x01" * n)      # never blocks: at most AHEAD unread credits in the pipe
        self.asked += n

    def _drop(self, why: str) -> None:
        said = self.close()                  # what the helper said on its way out, if anything
        self.failure = (said or why)[:200]
        log.warning("trace prompts: the helper process stopped (%s); the replay makes them itself from here",
                    self.failure)


def helper_command(path: str) -> list[str]:
    """The helper's command line: this module run by this interpreter."""
    return [sys.executable, "-m", "wavepp.runtime.sources.prompt_worker", path]


def _start(path: str) -> subprocess.Popen[bytes]:
    """A helper for the trace at ``path``, told nothing yet (OSError when it cannot start). Unbuffered: the
    answers are read from the descriptor as they come (:meth:`PromptWorker._take`)."""
    return subprocess.Popen(helper_command(path), bufsize=0, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)


def _taken_or_started(path: str) -> subprocess.Popen[bytes]:
    """The helper :func:`prestart` started for this trace if it still runs, else a new one."""
    spare = _SPARES.pop(os.path.realpath(path), None)
    if spare is not None:
        if spare.poll() is None:
            return spare
        _stop(spare)
    return _start(path)


# Helpers started ahead of their replay, by the trace's real path: at most one waits for each; the next
# PromptWorker of that trace takes it, and one never taken is stopped at exit.
_SPARES: dict[str, subprocess.Popen[bytes]] = {}


def prestart(path: str) -> None:
    """Start the helper of the trace at ``path`` now, while the bench sets up (imports, the cost model, the
    run), so the replay's first prompt does not wait for its start-up (~0.1 s); a no-op where one waits
    already or none can start (the replay then starts its own, and says why if that fails too)."""
    key = os.path.realpath(path)
    if key in _SPARES or not _ENDIAN_OK:
        return
    with contextlib.suppress(OSError):
        _SPARES[key] = _start(path)


@atexit.register
def stop_spares() -> None:
    """Stop the helpers started ahead that no replay took (at exit; idempotent)."""
    while _SPARES:
        _stop(_SPARES.popitem()[1])


def _stop(proc: subprocess.Popen[bytes]) -> str:
    """Close the helper's input (it exits at its end) and reap it, killed if it does not go; the last line
    it wrote to its error stream ("" when none)."""
    for stream in (proc.stdin, proc.stdout):
        if stream is not None:
            try:
                stream.close()
            except OSError:
                pass
    try:
        proc.wait(timeout=STOP_WAIT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    said = b""
    if proc.stderr is not None:
        with proc.stderr:
            said = proc.stderr.read()
    lines = said.decode("utf-8", "replace").strip().splitlines()
    return lines[-1] if lines else ""


def serve(path: str, credits: IO[bytes], out: IO[bytes]) -> None:
    """The helper: the trace at ``path`` indexed, then, once the settings line comes, its first ``ROWS`` rows in
    replay order, one prompt a credit."""
    from wavepp.runtime.sources.trace_file import TRACE_BLOCK_TOKENS, load_trace
    trace = load_trace(path, "skip")
    settings = credits.readline()
    if not settings:
        return                                      # stopped before a replay took it (a spare never used)
    rows, block_size, vocab, extra = settings.decode().rstrip("\n").split(" ")
    prompts = TracePrompts(TRACE_BLOCK_TOKENS, int(block_size), int(vocab), bytes.fromhex(extra))
    for i in range(min(int(rows), len(trace.rows))):
        if not credits.read(1):
            return                                  # the replay is done with us
        row = trace.rows[i]
        tokens, hashes = prompts.prompt(row.hash_ids, row.input_length)
        out.write(_HEADER.pack(i, ids_crc(row.hash_ids), len(tokens), len(hashes)))
        out.write(tokens.tobytes())
        out.write(array("Q", hashes).tobytes())
        out.flush()


def main(argv: Sequence[str]) -> int:
    (path,) = argv
    try:
        serve(path, sys.stdin.buffer, sys.stdout.buffer)
    except BrokenPipeError:
        return 0                                    # the replay ended first
    except Exception as exc:                        # one line for the replay's warning
        print(f"{type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
