"""What a timer costs a virtual-time loop: tasks that each sleep random delays, on the sim's loop (lean
scheduling, runtime/engines/sim/lean_loop.py) and on the same virtual clock with asyncio's scheduling,
alternated; microseconds of wall time a sleep, the best of each. The figure in the lean loop's commit;
the last row sleeps as the runtime's modelled costs do (runtime.clock.sleep: the lean loop's own timer).

    .venv/bin/python scripts/bench_virtual_loop.py [--tasks 50] [--sleeps 4000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import time
from collections.abc import Awaitable, Callable

from wavepp.runtime.clock import sleep as runtime_sleep
from wavepp.runtime.engines.sim.clock import VirtualClockLoop, VirtualTimeLoop


async def _sleepers(tasks: int, sleeps: int, sleep: Callable[[float], Awaitable[None]]) -> None:
    async def sleeper(rng: random.Random) -> None:
        for _ in range(sleeps):
            await sleep(rng.random() * 1e-3)
    await asyncio.gather(*(sleeper(random.Random(i)) for i in range(tasks)))


def per_sleep_us(loop_class: type[asyncio.AbstractEventLoop], tasks: int, sleeps: int,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> float:
    loop = loop_class()
    try:
        start = time.perf_counter()
        loop.run_until_complete(_sleepers(tasks, sleeps, sleep))
        return (time.perf_counter() - start) / (tasks * sleeps) * 1e6
    finally:
        loop.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=50)
    parser.add_argument("--sleeps", type=int, default=4000, help="sleeps a task")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    best: dict[str, float] = {}
    for _ in range(args.rounds):
        for name, cls, sleep in (("asyncio's scheduling", VirtualClockLoop, asyncio.sleep),
                                 ("lean scheduling", VirtualTimeLoop, asyncio.sleep),
                                 ("lean, runtime's sleep", VirtualTimeLoop, runtime_sleep)):
            us = per_sleep_us(cls, args.tasks, args.sleeps, sleep)
            best[name] = min(best.get(name, us), us)
    for name, us in best.items():
        print(f"{name:22} {us:5.2f} us a sleep")


if __name__ == "__main__":
    main()
