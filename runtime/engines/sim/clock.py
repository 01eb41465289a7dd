"""Virtual time for asyncio: when nothing is ready, jump to the next timer.

The runtime's coroutines only wait on the loop's clock (``asyncio.sleep``) or on each other
(queues, events). On a :class:`VirtualTimeLoop` ``loop.time()`` is virtual: whenever the loop
would block in ``select()`` with a timeout, the selector returns at once and virtual time
advances by that timeout. No real sleeping happens, and a run is deterministic for a seed
(callbacks run in the order asyncio schedules them; nothing depends on wall time).

The same coroutines run unchanged on an ordinary event loop on real engines.

A :class:`CpuClockLoop` is virtual time that also advances while the loop's own Python code runs:
by the CPU time the loop's thread spends (times ``scale``). A real-time runtime pays for its
admission, planning, span recording and task switches on one thread, and a modelled step then starts
late; on this clock a replay pays the same code's cost where it runs, so the same delays follow,
while modelled step times still pass without waiting. An idle wait is rounded up to the millisecond,
as epoll does on a real loop, plus the time a real loop takes to wake (a what-if replay of a
real-time run: :mod:`runtime.whatif.preview`).

While a plain virtual-time run is under way the garbage collector runs less often (:func:`batch_gc_begin`): a
replay allocates millions of short-lived objects and creates few cycles, and each collection walks the
young objects - and, now and then, every tracked object, the stages' block pools (hundreds of thousands of
blocks) included. Nothing a virtual-time run reports depends on its CPU time; a CPU-clock replay keeps the
collector a real loop runs with, since its clock charges what a collection costs.
"""

from __future__ import annotations

import asyncio
import gc
import math
import random
import selectors
import statistics
import threading
import time
from collections.abc import Coroutine
from typing import Any, TypeVar

from wavepp.runtime.engines.sim.lean_loop import LeanScheduling

T = TypeVar("T")


class _NoWaitSelector(selectors.DefaultSelector):
    """A real selector (the loop's self-pipe still works) that never blocks: it advances time.

    While callbacks are ready (``timeout == 0``) a :class:`VirtualTimeLoop` does not poll at all: nothing a
    virtual-time run waits on arrives through a file descriptor (another thread's ``call_soon_threadsafe``
    puts its callback in the ready queue itself; the self-pipe only wakes a blocked loop), and a poll a loop
    iteration is a system call every callback pays. Descriptors are polled whenever the loop would wait, so
    a socket's events still arrive, at the next advance of time - while the self-pipe is the only one
    registered (a bench on the in-process store), once in :data:`SELF_PIPE_POLL_EVERY` advances: enough to
    drain it (the poll was ~3 % of a trace replay). A :class:`CpuClockLoop` polls as a real loop does: its
    clock charges the loop's own CPU time, that system call included."""

    def __init__(self) -> None:
        super().__init__()
        self.loop: VirtualClockLoop | None = None
        self._unpolled = 0          # advances of time since the last poll, while only the self-pipe is registered

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        if self.loop is not None and not self.loop.polls_when_ready:
            if timeout == 0:
                return []
            if timeout is not None and len(self.get_map()) <= 1 and self._unpolled < SELF_PIPE_POLL_EVERY:
                self._unpolled += 1
                self.loop._now += self.loop.idle_wait(timeout)      # > 0: asyncio's timeouts are never negative
                return []
        self._unpolled = 0
        events = super().select(0)
        if events or self.loop is None:
            return events
        if timeout is None:
            # Nothing scheduled and nothing ready: in virtual time this is a deadlock.
            raise RuntimeError("virtual-time loop has nothing to wait for (deadlock)")
        if timeout > 0:
            self.loop._now += self.loop.idle_wait(timeout)
        return events


# While the self-pipe is the only descriptor a virtual-time loop watches, it is polled (drained) once in
# this many advances of time (_NoWaitSelector).
SELF_PIPE_POLL_EVERY = 1024

# Allocations between two young collections while a virtual-time run is under way (CPython's default: 700).
# A dynamo_mooncake_trace_1000 replay collected 1,038 times for 0.71-0.76 s of its ~3.9 s; at 10,000: 68
# times, 0.21-0.23 s (the command: docs/bench-and-grid.md, "What a replay costs").
BATCH_GC_GEN0 = 10_000

_gc_lock = threading.Lock()
_gc_users = 0
_gc_saved = gc.get_threshold()


def batch_gc_begin() -> None:
    """The young generation's threshold at :data:`BATCH_GC_GEN0` while at least one virtual-time loop is open
    (loops in threads of one process share it); :func:`batch_gc_end` gives the process's back after the last."""
    global _gc_users, _gc_saved
    with _gc_lock:
        if _gc_users == 0:
            _gc_saved = gc.get_threshold()
            gc.set_threshold(max(BATCH_GC_GEN0, _gc_saved[0]), *_gc_saved[1:])
        _gc_users += 1


def batch_gc_end() -> None:
    global _gc_users
    with _gc_lock:
        _gc_users -= 1
        if _gc_users == 0:
            gc.set_threshold(*_gc_saved)


class VirtualClockLoop(asyncio.SelectorEventLoop):
    """An asyncio loop whose clock is virtual and starts at 0; from its creation to its close the
    process collects garbage as a batch job does (:func:`batch_gc_begin`)."""

    polls_when_ready = False      # descriptors are polled only when the loop would wait (_NoWaitSelector)
    collects_as_batch = True

    def __init__(self) -> None:
        selector = _NoWaitSelector()
        super().__init__(selector)
        selector.loop = self
        self._now = 0.0
        # Timers closer than this are treated as due: keep it tiny so virtual time is exact.
        self._clock_resolution = 1e-12
        self._batch_gc = self.collects_as_batch
        if self._batch_gc:
            batch_gc_begin()

    def close(self) -> None:
        super().close()
        if self._batch_gc:
            self._batch_gc = False
            batch_gc_end()

    def time(self) -> float:
        return self._now

    def idle_wait(self, timeout: float) -> float:
        """How long an idle loop waits for a timer ``timeout`` away: exactly that, in virtual time."""
        return timeout


class VirtualTimeLoop(LeanScheduling, VirtualClockLoop):
    """Virtual time, with asyncio's scheduling lean (:mod:`runtime.engines.sim.lean_loop`: the same order, a
    fraction of its Python overhead, most of a replay's loop time)."""


class CpuClockLoop(VirtualClockLoop):
    """Virtual time plus the CPU time this loop's thread has spent since the loop first read its clock,
    times ``scale`` (the module doc). The thread's CPU time, not the wall clock: other processes
    on the machine do not make a replay slower, ``scale`` says how much slower the runtime ran."""

    polls_when_ready = True
    collects_as_batch = False     # its clock charges what a collection costs, as on a real loop

    def __init__(self, scale: float = 1.0, wake_s: float = 0.0) -> None:
        super().__init__()
        self.scale = scale
        self.wake_s = wake_s              # how late an idle real loop wakes beyond the rounding (measured)
        self._cpu0: float | None = None

    def time(self) -> float:
        cpu = time.thread_time()
        if self._cpu0 is None:
            self._cpu0 = cpu
        return self._now + (cpu - self._cpu0) * self.scale

    def idle_wait(self, timeout: float) -> float:
        """As a real loop on Linux: epoll_wait counts whole milliseconds, so the selector rounds a
        timeout up to the next one (CPython's ``selectors.EpollSelector``) and a timer that falls due
        while the loop idles fires up to 1 ms late; then the thread takes ``wake_s`` to run again
        (:func:`measure_wake`)."""
        return math.ceil(timeout * 1e3) * 1e-3 + self.wake_s


def measure_wake(samples: int = 100, seed: int = 0) -> float:
    """How late a real asyncio loop on this machine wakes from an idle wait, beyond the millisecond
    rounding: the median over ``samples`` sleeps of 0.2-3 ms (a few tenths of a second in all). Run
    in a thread of its own, so it never waits inside another running loop."""
    rng = random.Random(seed)

    async def sleeps() -> list[float]:
        loop = asyncio.get_running_loop()
        late = []
        for _ in range(samples):
            delay = rng.uniform(0.0002, 0.003)
            start = loop.time()
            await asyncio.sleep(delay)
            late.append(loop.time() - start - math.ceil(delay * 1e3) * 1e-3)
        return late

    out: list[float] = []
    thread = threading.Thread(target=lambda: out.extend(asyncio.run(sleeps())), name="wake-probe")
    thread.start()
    thread.join()
    return max(statistics.median(out), 0.0) if out else 0.0


def virtual_runner(cpu_scale: float | None = None, wake_s: float = 0.0) -> asyncio.Runner:
    """An :class:`asyncio.Runner` in virtual time: Ctrl-C (or an exception a signal handler raises) cancels
    every task and lets it finish before the loop closes - no "Task was destroyed but it is pending" and no
    "Event loop is closed" from tasks that outlived their loop. ``cpu_scale``: on a :class:`CpuClockLoop`
    (the loop's own CPU time, times this, also passes; an idle wait is rounded up as a real loop's and
    takes ``wake_s`` more)."""
    if cpu_scale is not None and not cpu_scale > 0:
        raise ValueError(f"CPU clock scale must be positive, got {cpu_scale}")
    if cpu_scale is None:
        return asyncio.Runner(loop_factory=VirtualTimeLoop)
    return asyncio.Runner(loop_factory=lambda: CpuClockLoop(cpu_scale, wake_s))


def run_virtual(main: Coroutine[Any, Any, T], cpu_scale: float | None = None, wake_s: float = 0.0) -> T:
    """Run ``main`` to completion in virtual time (like ``asyncio.run``; :func:`virtual_runner`)."""
    with virtual_runner(cpu_scale, wake_s) as runner:
        return runner.run(main)
