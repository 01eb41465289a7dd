"""The sim's virtual-time loop: time jumps to the next timer, and what arrives from outside the loop (a
socket, another thread) still arrives although the loop never blocks."""

from __future__ import annotations

import asyncio
import socket
import threading

from wavepp.runtime.engines.sim.clock import run_virtual


def test_time_jumps_to_each_timer_exactly() -> None:
    async def main() -> list[float]:
        loop = asyncio.get_running_loop()
        seen = []
        for delay in (0.5, 2.0, 0.25):
            await asyncio.sleep(delay)
            seen.append(loop.time())
        return seen

    assert run_virtual(main()) == [0.5, 2.5, 2.75]


def test_a_socket_read_arrives_while_other_callbacks_keep_the_loop_busy() -> None:
    """Data written before a long run of ready callbacks is read once the loop waits for a timer."""
    a, b = socket.socketpair()
    a.setblocking(False)

    async def main() -> tuple[bytes, float]:
        loop = asyncio.get_running_loop()
        got: asyncio.Future[bytes] = loop.create_future()
        loop.add_reader(a.fileno(), lambda: got.done() or got.set_result(a.recv(16)))
        b.send(b"ping")
        for _ in range(1000):                  # ready callbacks: the loop never waits here
            await asyncio.sleep(0)
        await asyncio.sleep(1.0)                # now it waits: descriptors are polled
        data = await asyncio.wait_for(got, timeout=5.0)
        loop.remove_reader(a.fileno())
        return data, loop.time()

    try:
        data, at = run_virtual(main())
    finally:
        a.close()
        b.close()
    assert data == b"ping" and at >= 1.0


def test_another_threads_callback_runs_while_the_loop_is_busy() -> None:
    async def main() -> int:
        loop = asyncio.get_running_loop()
        done: asyncio.Future[int] = loop.create_future()
        threading.Thread(target=lambda: loop.call_soon_threadsafe(done.set_result, 42)).start()
        spins = 0
        while not done.done():                  # never idle: only ready callbacks until it lands
            await asyncio.sleep(0)
            spins += 1
            assert spins < 10_000_000
        return done.result()

    assert run_virtual(main()) == 42


def test_a_cpu_clock_loop_polls_while_busy_as_a_real_loop_does() -> None:
    """The CPU clock charges what a real loop pays, its poll each iteration included: a socket's data
    arrives while callbacks are still ready (the plain virtual loop reads it only once it would wait)."""
    def spins_until_read(cpu_scale: float | None) -> bool:
        a, b = socket.socketpair()
        a.setblocking(False)

        async def main() -> bool:
            loop = asyncio.get_running_loop()
            got: list[bytes] = []
            loop.add_reader(a.fileno(), lambda: got.append(a.recv(16)))
            b.send(b"ping")
            for _ in range(100):
                await asyncio.sleep(0)
            loop.remove_reader(a.fileno())
            return bool(got)

        try:
            return run_virtual(main(), cpu_scale)
        finally:
            a.close()
            b.close()

    assert spins_until_read(1.0) is True
    assert spins_until_read(None) is False


def test_a_virtual_time_run_collects_garbage_as_a_batch_job_and_gives_the_threshold_back() -> None:
    """Inside a plain virtual-time run the young generation's threshold is BATCH_GC_GEN0; after it, the
    process's own again. A CPU-clock replay keeps the process's (its clock charges a collection)."""
    import gc

    from wavepp.runtime.engines.sim.clock import BATCH_GC_GEN0

    async def threshold() -> tuple[int, int, int]:
        return gc.get_threshold()

    before = gc.get_threshold()
    assert before[0] < BATCH_GC_GEN0            # else the test shows nothing
    assert run_virtual(threshold()) == (BATCH_GC_GEN0, *before[1:])
    assert gc.get_threshold() == before
    assert run_virtual(threshold(), cpu_scale=1.0) == before


def test_overlapping_virtual_runs_give_the_threshold_back_after_the_last() -> None:
    """Runs in threads of one process overlap: one that ends inside another leaves the batch threshold."""
    import gc

    from wavepp.runtime.engines.sim.clock import BATCH_GC_GEN0, virtual_runner

    async def gen0() -> int:
        return gc.get_threshold()[0]

    before = gc.get_threshold()
    with virtual_runner() as outer:
        assert run_virtual(gen0()) == BATCH_GC_GEN0         # begins and ends inside the outer run
        assert outer.run(gen0()) == BATCH_GC_GEN0
    assert gc.get_threshold() == before

