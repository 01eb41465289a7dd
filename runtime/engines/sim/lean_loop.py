"""asyncio's scheduling for a virtual-time loop, with its Python-level overheads taken out.

A trace replay runs about a hundred timers a request (the sim's modelled costs are ``asyncio.sleep``) and
twice as many callbacks, and asyncio spends most of a timer's cost in Python: its heap of ``TimerHandle``
orders them by a ``__lt__`` written in Python (a push or pop calls it ~log2(n) times), and every
``call_soon``/``call_at`` checks for a closed loop and debug mode before making a handle whose constructor
asks for debug mode again. :class:`LeanScheduling` keeps the same algorithm and so the same order to the
last tie: its heap holds ``(when, handle)`` pairs, which compare as their handles do (a pair with an
earlier ``when`` is smaller; pairs with equal ``when`` are neither smaller nor larger, as two handles with
equal ``when`` are) but in C, and ``heapq`` makes the same moves on either; the iteration
(:meth:`LeanScheduling._run_once`) is asyncio's, cancelled-timer clean-up included, without debug mode's
slow-callback report and without the zero-timeout poll a virtual-time selector answers with nothing. One
difference: a timer is due when its time is at most the clock plus its resolution, not below it. Past
16,384 s a virtual clock plus 1e-12 s (the resolution that keeps virtual time exact) rounds to the clock
itself, so a timer whose time the clock has just reached would never be due under asyncio's ``<`` and the
loop would spin on it forever (a trace replay of more than 4.5 hours hung). In debug mode handles are
asyncio's own and the thread and callback checks run.

Only for a loop whose time does not pass while it runs: a :class:`runtime.engines.sim.clock.CpuClockLoop`
charges the loop's own CPU time, asyncio's overheads included, as a real loop pays them, so it keeps
asyncio's scheduling.
"""

from __future__ import annotations

import asyncio
import contextvars
import heapq
from asyncio import events, format_helpers, futures
from collections.abc import Callable
from typing import Any, TypeVarTuple, Unpack

_Ts = TypeVarTuple("_Ts")

# asyncio's own thresholds (base_events): clean the heap of cancelled timers once more than half of more
# than 100 are cancelled; never wait longer than a day in one select.
_MIN_SCHEDULED = 100
_CANCELLED_FRACTION = 0.5
_MAX_SELECT_TIMEOUT = 24 * 3600


class _Handle(events.Handle):
    """asyncio's Handle, made without asking the loop for debug mode (the loop asked already)."""

    __slots__ = ()

    def __init__(self, callback: Callable[..., object], args: tuple[Any, ...], loop: asyncio.AbstractEventLoop,
                 context: contextvars.Context | None = None) -> None:
        self._context = contextvars.copy_context() if context is None else context
        self._loop = loop
        self._callback = callback
        self._args = args
        self._cancelled = False
        self._repr = None
        self._source_traceback = None

    def cancel(self) -> None:
        if not self._cancelled:
            self._cancelled = True
            self._callback = None           # type: ignore[assignment]
            self._args = None               # type: ignore[assignment]


class _TimerHandle(_Handle, events.TimerHandle):
    """asyncio's TimerHandle, made as :class:`_Handle` is."""

    __slots__ = ()

    def __init__(self, when: float, callback: Callable[..., object], args: tuple[Any, ...],
                 loop: asyncio.AbstractEventLoop, context: contextvars.Context | None = None) -> None:
        _Handle.__init__(self, callback, args, loop, context)
        self._when = when
        self._scheduled = False

    def cancel(self) -> None:
        if not self._cancelled and self._scheduled:    # the loop's _timer_handle_cancelled: for the heap's clean-up
            self._loop._timer_cancelled_count += 1     # type: ignore[attr-defined]
        _Handle.cancel(self)


class LeanScheduling(asyncio.SelectorEventLoop):
    """``call_soon``, ``call_at`` and the loop's iteration as asyncio's (module doc), timers in a heap of
    ``(when, handle)`` pairs."""

    _scheduled: list[Any]               # asyncio's attribute, holding pairs here
    _debug: bool
    _ready: Any
    _stopping: bool
    _timer_cancelled_count: int
    _clock_resolution: float

    def call_soon(self, callback: Callable[[Unpack[_Ts]], object], *args: *_Ts,
                  context: contextvars.Context | None = None) -> asyncio.Handle:
        if self._debug:
            return super().call_soon(callback, *args, context=context)
        if self._closed:                                   # type: ignore[attr-defined]
            raise RuntimeError("Event loop is closed")
        handle = _Handle(callback, args, self, context)
        self._ready.append(handle)
        return handle

    def call_later(self, delay: float, callback: Callable[[Unpack[_Ts]], object], *args: *_Ts,
                   context: contextvars.Context | None = None) -> asyncio.TimerHandle:
        if delay is None:
            raise TypeError("delay must not be None")
        return self.call_at(self.time() + delay, callback, *args, context=context)

    def call_at(self, when: float, callback: Callable[[Unpack[_Ts]], object], *args: *_Ts,
                context: contextvars.Context | None = None) -> asyncio.TimerHandle:
        if when is None:
            raise TypeError("when cannot be None")
        if self._closed:                                   # type: ignore[attr-defined]
            raise RuntimeError("Event loop is closed")
        if self._debug:
            self._check_thread()                           # type: ignore[attr-defined]
            self._check_callback(callback, "call_at")      # type: ignore[attr-defined]
            timer = events.TimerHandle(when, callback, args, self, context)
        else:
            timer = _TimerHandle(when, callback, args, self, context)
        heapq.heappush(self._scheduled, (when, timer))
        timer._scheduled = True                            # type: ignore[attr-defined]
        return timer

    def _run_once(self) -> None:
        """One iteration: drop cancelled timers; if nothing is ready, poll (the selector decides how time
        passes); move the timers that are due to the ready queue; run what was ready. While callbacks are
        ready asyncio polls with a zero timeout, which a virtual-time loop's selector answers with nothing
        (runtime.engines.sim.clock._NoWaitSelector): here it is not asked."""
        scheduled = self._scheduled
        count = len(scheduled)
        if count > _MIN_SCHEDULED and self._timer_cancelled_count / count > _CANCELLED_FRACTION:
            kept = []
            for entry in scheduled:
                if entry[1]._cancelled:
                    entry[1]._scheduled = False
                else:
                    kept.append(entry)
            heapq.heapify(kept)
            self._scheduled = scheduled = kept
            self._timer_cancelled_count = 0
        else:
            while scheduled and scheduled[0][1]._cancelled:
                self._timer_cancelled_count -= 1
                heapq.heappop(scheduled)[1]._scheduled = False

        ready = self._ready
        if not (ready or self._stopping):                  # it would wait: the selector moves time on
            timeout = None
            if scheduled:
                timeout = min(max(0, scheduled[0][0] - self.time()), _MAX_SELECT_TIMEOUT)
            events_ready = self._selector.select(timeout)  # type: ignore[attr-defined]
            if events_ready:
                self._process_events(events_ready)          # type: ignore[attr-defined]

        end_time = self.time() + self._clock_resolution
        while scheduled and scheduled[0][0] <= end_time:
            handle = heapq.heappop(scheduled)[1]
            handle._scheduled = False
            ready.append(handle)

        for _ in range(len(ready)):
            handle = ready.popleft()
            if not handle._cancelled:                       # Handle._run, inlined: a call fewer a callback
                try:
                    handle._context.run(handle._callback, *handle._args)
                except (SystemExit, KeyboardInterrupt):
                    raise
                except BaseException as exc:
                    _report(self, handle, exc)

    async def lean_sleep(self, delay: float) -> None:
        """``asyncio.sleep(delay)`` for ``delay > 0``, its timer made in one step rather than through
        ``call_later``/``call_at``: the same future, timer and heap entry, so the same order
        (:func:`runtime.clock.sleep` takes it where the loop has it)."""
        if self._debug:
            await asyncio.sleep(delay)
            return
        future = self.create_future()
        when = self.time() + delay
        settle = futures._set_result_unless_cancelled                # type: ignore[attr-defined]
        timer = _TimerHandle(when, settle, (future, None), self, None)
        heapq.heappush(self._scheduled, (when, timer))
        timer._scheduled = True
        try:
            await future
        finally:
            if not future.done() or future.cancelled():    # asyncio cancels its timer here; ran, it is a no-op
                timer.cancel()


def _report(loop: asyncio.AbstractEventLoop, handle: asyncio.Handle, exc: BaseException) -> None:
    """What ``Handle._run`` reports of a callback that raised."""
    source = format_helpers._format_callback_source(handle._callback, handle._args)   # type: ignore[attr-defined]
    context: dict[str, Any] = {"message": f"Exception in callback {source}", "exception": exc, "handle": handle}
    if handle._source_traceback:                                      # type: ignore[attr-defined]
        context["source_traceback"] = handle._source_traceback        # type: ignore[attr-defined]
    loop.call_exception_handler(context)
