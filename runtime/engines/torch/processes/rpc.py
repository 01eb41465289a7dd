"""Rank 0's messages to a stage process, and how a dead stage becomes an error instead of a wait.

gloo's point-to-point send is a rendezvous: the data moves once the receiver has posted its receive.
A send to a process that stopped receiving - stuck, stopped, or killed before gloo saw its socket
close - therefore waits out the process group's timeout (10 minutes, ``launch.link_timeout``). Made on
the caller's thread (the asyncio loop), such a send froze the whole run, asyncio's own timeouts
included. So nothing here sends on the caller's thread: a caller queues its message and waits on
a future, a daemon thread per link does the sending, and whoever first sees the stage dead fails
the futures:

- the watcher (spawned stages): the process's sentinel is ready the moment it ends, however it
  ends and whatever gloo noticed;
- the reader: the replies link broke (torchrun stages have no process handle: this is their sign);
- the writer: a send raised.

A send stuck on a dead link stays stuck on its daemon thread, where nobody waits for it.
"""

from __future__ import annotations

import asyncio
import itertools
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, InvalidStateError
from multiprocessing.connection import wait
from multiprocessing.process import BaseProcess
from typing import Any, TypeVar

from wavepp.runtime.engines.torch.processes.launch import describe_exit
from wavepp.runtime.engines.torch.processes.wire import Link

T = TypeVar("T")
CLOSE_WAIT_S = 30.0        # an orderly close waits this long for a stage's goodbye, then kills it
LINK_BREAK_WAIT_S = 5.0    # a broken link gives its process this long to end (to say how it ended)


class StageDied(RuntimeError):
    """A stage process died or its link broke; the message names the stage and the cause."""


def fail(fut: Future[Any], exc: BaseException) -> None:
    """``fut`` fails with ``exc`` unless it is done already (answered, failed by a death, cancelled)."""
    try:
        fut.set_exception(exc)
    except InvalidStateError:
        pass


def resolve(fut: Future[T], value: T) -> None:
    """``fut`` holds ``value`` unless it is done already."""
    try:
        fut.set_result(value)
    except InvalidStateError:
        pass


def settle(fut: Future[T], fn: Callable[..., T], *args: Any) -> None:
    """Run ``fn`` and resolve ``fut`` with its outcome - unless a death (or the caller) was first."""
    try:
        value = fn(*args)
    except Exception as exc:
        fail(fut, exc)
    else:
        resolve(fut, value)


class LinkSender:
    """The one thread that sends on a link, in submission order; each send resolves its future.

    A send whose future is already done (a death failed it, its caller gave up) is skipped.
    """

    def __init__(self, name: str) -> None:
        self._queue: queue.SimpleQueue[tuple[Future[Any], Callable[..., Any], tuple[Any, ...]] | None] = \
            queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def submit(self, fut: Future[T], fn: Callable[..., T], *args: Any) -> Future[T]:
        self._queue.put((fut, fn, args))
        return fut

    def close(self, wait_s: float = 0.0) -> None:
        """The thread ends after the sends queued so far (at once, if it is not stuck in one); wait up
        to ``wait_s`` for that (a send on a link whose far end is gone returns within moments)."""
        self._queue.put(None)
        self._thread.join(timeout=wait_s)

    def _run(self) -> None:
        while (item := self._queue.get()) is not None:
            fut, fn, args = item
            if not fut.done():
                settle(fut, fn, *args)


class RpcClient:
    """Commands to one stage process and its replies, matched by message id.

    :meth:`submit` never waits on the network: it queues the message (in call order) and returns a
    thread-safe future, so the same client serves the asyncio loop (:meth:`call`) and plain code
    (:meth:`call_sync`). A dead stage fails every pending future with :class:`StageDied`, within
    seconds; ``on_death(why)`` hears of it once (the other stages then stop too).
    """

    def __init__(self, stage: int, commands: Link, replies: Link, proc: BaseProcess | None = None,
                 on_death: Callable[[str], None] | None = None) -> None:
        self.stage = stage
        self._commands, self._replies, self._proc = commands, replies, proc
        self._on_death = on_death
        self._ids = itertools.count()
        self._pending: dict[int, Future[Any]] = {}
        self._sent_at: dict[int, float] = {}   # when each pending call was asked (overdue)
        self._lock = threading.Lock()          # the pending table, the outbox's order, the cause of death
        self._outbox: queue.SimpleQueue[tuple[int, bytes] | None] = queue.SimpleQueue()
        self._dead: str | None = None
        self._closing = -1                     # the id of the shutdown message, once asked
        self._threads = [threading.Thread(target=self._read, name=f"from-stage{stage}", daemon=True),
                         threading.Thread(target=self._write, name=f"to-stage{stage}", daemon=True)]
        if proc is not None:
            self._threads.append(threading.Thread(target=self._watch, name=f"watch-stage{stage}", daemon=True))
        for t in self._threads:
            t.start()

    def submit(self, op: str, *args: Any) -> Future[Any]:
        fut: Future[Any] = Future()
        with self._lock:
            if self._dead is not None:
                fut.set_exception(StageDied(self._dead))
                return fut
            msg_id = next(self._ids)
            payload = Link.encode((msg_id, op, args))   # an unpicklable argument raises here, in the caller
            self._pending[msg_id] = fut
            self._sent_at[msg_id] = time.monotonic()
            if op == "shutdown":
                self._closing = msg_id
            self._outbox.put((msg_id, payload))
        return fut

    async def call(self, op: str, *args: Any) -> Any:
        return await asyncio.wrap_future(self.submit(op, *args))

    def call_sync(self, op: str, *args: Any) -> Any:
        return self.submit(op, *args).result()

    # ---- the three threads -------------------------------------------------------------------
    def _write(self) -> None:
        """The commands link's only sender; it stops at the shutdown message or a death."""
        while (item := self._outbox.get()) is not None and self._dead is None:
            msg_id, payload = item
            try:
                self._commands.send_encoded(payload)
            except Exception as exc:          # gloo: the connection is gone
                self._link_broke(f"is gone: {exc}")
                return
            if msg_id == self._closing:
                return

    def _read(self) -> None:
        try:
            while True:
                msg_id, ok, value = self._replies.recv_obj()
                with self._lock:
                    fut = self._pending.pop(msg_id, None)
                    self._sent_at.pop(msg_id, None)
                if fut is not None and ok:
                    resolve(fut, value)
                elif fut is not None:
                    fail(fut, value)
                if msg_id == self._closing:
                    return
        except Exception as exc:              # the process died or the link broke: nothing will answer
            self._link_broke(f"stopped answering: {exc}")

    def _watch(self) -> None:
        assert self._proc is not None
        wait([self._proc.sentinel])
        with self._lock:
            asked = self._closing >= 0
        # After a shutdown the stage ends as asked: only a goodbye it never sent is failed.
        self._die(f"stage {self.stage} process {self.exit_cause() or 'ended'}", propagate=not asked)

    # ---- deaths --------------------------------------------------------------------------------
    def exit_cause(self, wait_s: float = 1.0) -> str | None:
        """How a spawned stage process ended ("was killed by SIGKILL", "exited with code 1"), if it did
        within ``wait_s``."""
        if self._proc is None:
            return None
        deadline = time.monotonic() + wait_s
        self._proc.join(timeout=wait_s)
        # Another thread may be reaping it right now: its waitpid won, ours found no child, and the
        # exit code shows up here once that thread has stored it.
        while (code := self._proc.exitcode) is None and time.monotonic() < deadline:
            time.sleep(0.01)
        return None if code is None else describe_exit(code)

    def _link_broke(self, what: str) -> None:
        # A link breaks as its process goes: give it a moment, to name how it ended.
        self._die(f"stage {self.stage} process {self.exit_cause(LINK_BREAK_WAIT_S) or what}")

    def _die(self, why: str, propagate: bool = True) -> None:
        why = why.splitlines()[0]
        with self._lock:
            first = self._dead is None
            if first:
                self._dead = why
            cause = self._dead or why
            pending, self._pending = self._pending, {}
            self._sent_at.clear()
        self._outbox.put(None)                 # the writer stops (once a send it is stuck in returns)
        for fut in pending.values():
            fail(fut, StageDied(cause))
        if first and propagate and self._on_death is not None:
            self._on_death(cause)

    def overdue(self, limit_s: float) -> None:
        """A call unanswered for ``limit_s`` ends the stage (``StageDied``, and the world with it): a
        process alive but stuck in a step. gloo's timeout on the reply link caught it before the
        keepalive (leader.py) kept that link busy with the answers to its pings."""
        with self._lock:
            oldest = min(self._sent_at.values(), default=None)
        if oldest is not None and time.monotonic() - oldest > limit_s:
            self._die(f"stage {self.stage} process did not answer a call within {limit_s:g} s (stopped or stuck; "
                      f"$WAVEPP_DIST_TIMEOUT_S sets the limit)")

    def fail(self, why: str) -> None:
        """Another stage died: every call to this one fails with ``why`` (the run is over)."""
        self._die(why, propagate=False)

    @property
    def alive(self) -> bool:
        return self._dead is None

    def kill(self) -> None:
        """Stop a spawned stage process without a word (after another stage died, or on an interrupt)."""
        self._die(f"stage {self.stage} stopped: another stage process died", propagate=False)
        if self._proc is not None:
            self._proc.kill()
            self._proc.join(timeout=CLOSE_WAIT_S)
            # Its links are closed now, so the threads on them leave gloo at once; wait for that. A
            # daemon thread that returns from a gloo wait while the interpreter finalizes cannot take
            # the GIL back and ends inside pybind11's noexcept frame: std::terminate, exit -6.
            leave_by = time.monotonic() + LINK_BREAK_WAIT_S + 1
            for t in self._threads:
                t.join(timeout=max(0.0, leave_by - time.monotonic()))

    def close(self, wait_s: float = CLOSE_WAIT_S) -> None:
        """Orderly: the stage drains its links, says goodbye and ends. Raises StageDied, or TimeoutError
        when the goodbye does not come within ``wait_s`` (the caller then kills it)."""
        self.submit("shutdown").result(timeout=wait_s)
        for t in self._threads:
            t.join(timeout=wait_s)
        if self._proc is not None:
            self._proc.join(timeout=wait_s)
            if self._proc.is_alive():
                self._proc.kill()
