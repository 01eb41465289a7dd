"""The virtual-time loop's lean scheduling runs every callback in the order asyncio's scheduling runs it:
ties between timers, cancelled timers (and the heap's clean-up once most are), tasks, events, timeouts, the
runtime's sleep (its own timer on the lean loop) and sleepers cancelled; a callback that raises is reported
as asyncio reports it."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from typing import Any

import pytest

from wavepp.runtime.clock import sleep as runtime_sleep
from wavepp.runtime.engines.sim.clock import VirtualClockLoop, VirtualTimeLoop

DELAYS = (0.0, 0.001, 0.001, 0.002, 0.0025, 0.01)     # few distinct values: many timers fall due together


async def _scenario(seed: int, log: list[tuple[float, str]]) -> None:
    loop = asyncio.get_running_loop()
    rng = random.Random(seed)
    wake = asyncio.Event()

    def note(what: str) -> None:
        log.append((loop.time(), what))

    async def worker(w: int) -> None:
        for step in range(60):
            kind = rng.random()
            if kind < 0.3:
                await asyncio.sleep(rng.choice(DELAYS))
            elif kind < 0.45:
                await runtime_sleep(rng.choice(DELAYS))
            elif kind < 0.5:                      # sleepers cancelled before, as and after their timers fall due
                sleepers = [asyncio.ensure_future(runtime_sleep(d)) for d in DELAYS[1:]]
                await asyncio.sleep(rng.choice(DELAYS))
                for t in sleepers:
                    t.cancel()
                ends = await asyncio.gather(*sleepers, return_exceptions=True)
                note(f"cancelled {sum(isinstance(e, asyncio.CancelledError) for e in ends)} {w}.{step}")
            elif kind < 0.65:                     # a timer most of which are cancelled: the heap's clean-up
                handles = [loop.call_later(rng.choice(DELAYS) + 1.0, note, f"late {w}.{step}.{i}") for i in range(8)]
                for h in handles[: rng.randrange(9)]:
                    h.cancel()
            elif kind < 0.75:
                try:
                    await asyncio.wait_for(wake.wait(), rng.choice(DELAYS[1:]))
                except TimeoutError:
                    note(f"timeout {w}.{step}")
            elif kind < 0.85:
                wake.set()
                wake.clear()
            else:
                loop.call_soon(note, f"soon {w}.{step}")
            note(f"{w}.{step}")

    await asyncio.gather(*(worker(w) for w in range(40)))
    await asyncio.sleep(2.0)                      # the late timers that were not cancelled


@pytest.mark.parametrize("seed", range(4))
def test_lean_scheduling_runs_callbacks_in_asyncio_order(seed: int) -> None:
    def run(factory: Callable[[], asyncio.AbstractEventLoop]) -> list[tuple[float, str]]:
        log: list[tuple[float, str]] = []
        with asyncio.Runner(loop_factory=factory) as runner:
            runner.run(_scenario(seed, log))
        return log

    ours, asyncios = run(VirtualTimeLoop), run(VirtualClockLoop)
    assert len(ours) > 2_000 and any(w.startswith("late") for _, w in ours)
    assert ours == asyncios


def test_a_closed_loop_refuses_callbacks_and_a_cancelled_timer_never_runs() -> None:
    loop = VirtualTimeLoop()
    ran: list[Any] = []
    loop.call_later(0.5, ran.append, "cancelled").cancel()
    loop.call_later(1.0, ran.append, "ran")
    loop.run_until_complete(asyncio.sleep(2.0))
    assert ran == ["ran"] and loop.time() == 2.0
    loop.close()
    with pytest.raises(RuntimeError, match="closed"):
        loop.call_soon(ran.append, 1)
    with pytest.raises(RuntimeError, match="closed"):
        loop.call_at(3.0, ran.append, 1)


def test_a_callback_that_raises_is_reported_as_asyncio_reports_it() -> None:
    def reports(factory: Callable[[], asyncio.AbstractEventLoop]) -> list[tuple[str, str]]:
        loop = factory()
        seen: list[tuple[str, str]] = []
        loop.set_exception_handler(lambda _, ctx: seen.append((ctx["message"], repr(ctx["exception"]))))

        def boom(x: int) -> None:
            raise ValueError(f"boom {x}")
        loop.call_soon(boom, 1)
        loop.call_later(0.5, boom, 2)
        loop.run_until_complete(asyncio.sleep(1.0))
        loop.close()
        return seen

    ours = reports(VirtualTimeLoop)
    assert len(ours) == 2 and ours[0][0].startswith("Exception in callback ") and "boom 2" in ours[1][1]
    assert ours == reports(VirtualClockLoop)
