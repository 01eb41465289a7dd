"""The virtual-time loop: time jumps to the next timer, descriptors are still served, a deadlock is named."""

from __future__ import annotations

import asyncio
import selectors
import socket
import threading

import pytest

from wavepp.runtime.engines.sim.clock import SELF_PIPE_POLL_EVERY, run_virtual


@pytest.fixture
def polls(monkeypatch: pytest.MonkeyPatch) -> list[float | None]:
    """Every poll of the loop's descriptors (a system call), by its timeout."""
    seen: list[float | None] = []
    real = selectors.EpollSelector.select

    def counted(self: selectors.EpollSelector, timeout: float | None = None) -> list:  # type: ignore[type-arg]
        seen.append(timeout)
        return real(self, timeout)
    monkeypatch.setattr(selectors.EpollSelector, "select", counted)
    return seen


def test_sleeps_advance_virtual_time_exactly_and_poll_only_to_drain_the_self_pipe(polls: list[float | None]) -> None:
    advances = 3 * SELF_PIPE_POLL_EVERY

    async def main() -> float:
        loop = asyncio.get_running_loop()
        for _ in range(advances):
            await asyncio.sleep(0.25)
        return loop.time()

    assert run_virtual(main()) == advances * 0.25
    assert advances // SELF_PIPE_POLL_EVERY - 1 <= len(polls) <= advances // SELF_PIPE_POLL_EVERY + 2


def test_a_registered_socket_is_polled_at_every_advance_and_its_data_arrives(polls: list[float | None]) -> None:
    async def main() -> tuple[bytes, float]:
        loop = asyncio.get_running_loop()
        a, b = socket.socketpair()
        a.setblocking(False)
        b.setblocking(False)
        got: asyncio.Future[bytes] = loop.create_future()
        loop.add_reader(b.fileno(), lambda: got.done() or got.set_result(b.recv(16)))
        try:
            for _ in range(10):
                await asyncio.sleep(1.0)
            a.send(b"hello")
            await asyncio.sleep(1.0)
            assert got.done(), "the socket's data waits for the next advance of time, no longer"
            return got.result(), loop.time()
        finally:
            loop.remove_reader(b.fileno())
            a.close()
            b.close()

    assert run_virtual(main()) == (b"hello", 11.0)
    assert len(polls) >= 11


def test_another_threads_callbacks_run_without_a_poll() -> None:
    """``call_soon_threadsafe`` puts its callback in the ready queue itself: no poll has to see the
    self-pipe's byte first."""
    async def main() -> list[int]:
        loop = asyncio.get_running_loop()
        ran: list[int] = []
        thread = threading.Thread(target=lambda: [loop.call_soon_threadsafe(ran.append, i) for i in range(5000)])
        thread.start()
        for _ in range(10_000_000):
            if len(ran) == 5000:
                break
            await asyncio.sleep(0.001)
        thread.join()
        return ran

    assert run_virtual(main()) == list(range(5000))


def test_a_loop_with_nothing_to_wait_for_is_a_deadlock() -> None:
    async def main() -> None:
        await asyncio.get_running_loop().create_future()

    with pytest.raises(RuntimeError, match="deadlock"):
        run_virtual(main())


def test_a_run_past_four_and_a_half_hours_of_virtual_time_keeps_going() -> None:
    """Past 16,384 s the clock plus its 1e-12 s resolution rounds to the clock: a timer whose time has just
    come must still be due (it was not, and the loop spun on it forever)."""
    async def main() -> float:
        for delay in (20_000.0, 1e-13, 3_600.0 * 24 * 365, 0.25):
            await asyncio.sleep(delay)
        return asyncio.get_running_loop().time()

    out: list[float] = []
    thread = threading.Thread(target=lambda: out.append(run_virtual(main())), daemon=True)
    thread.start()
    thread.join(timeout=30)
    assert out == [20_000.0 + 3_600.0 * 24 * 365 + 0.25]
