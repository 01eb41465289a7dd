"""RpcClient without torch.distributed: fake links and a fake process show that a caller never
waits on a send, and that a dead stage fails its calls within seconds, however it is noticed."""

from __future__ import annotations

import os
import pickle
import queue
import threading
import time
from concurrent.futures import Future
from multiprocessing.connection import wait
from typing import Any

import pytest

from wavepp.runtime.engines.torch.processes.rpc import LinkSender, RpcClient, StageDied

SOON_S = 10.0          # "within seconds" on a loaded machine; a regression waits forever instead


class FakeProcess:
    """What RpcClient reads of a spawned stage: a sentinel ready once it ends, and its exit code."""

    def __init__(self) -> None:
        self._r, self._w = os.pipe()
        self.exitcode: int | None = None

    @property
    def sentinel(self) -> int:
        return self._r

    def end(self, exitcode: int) -> None:
        if self.exitcode is None:
            self.exitcode = exitcode
            os.close(self._w)

    def join(self, timeout: float | None = None) -> None:
        wait([self._r], timeout)

    def is_alive(self) -> bool:
        return self.exitcode is None

    def kill(self) -> None:
        self.end(-9)


class FakeStage:
    """Both links of one stage: a command is answered with its op name, until the stage is jammed
    (a send then blocks forever, as gloo's does to a stage that stopped receiving) or cut (the
    replies link raises, as gloo's does once it sees the connection closed)."""

    def __init__(self) -> None:
        self.replies: queue.SimpleQueue[tuple[int, bool, Any] | Exception] = queue.SimpleQueue()
        self.jammed = threading.Event()
        self.release = threading.Event()       # lets a jammed send return when the test ends
        self.holding = threading.Event()       # replies wait in ``held``
        self.held: list[tuple[int, bool, Any]] = []
        self.received: list[str] = []

    def send_encoded(self, payload: bytes) -> None:
        if self.jammed.is_set():
            self.release.wait()
            raise RuntimeError("released")
        msg_id, op, _ = pickle.loads(payload)
        self.received.append(op)
        if self.holding.is_set():
            self.held.append((msg_id, True, op))
        else:
            self.replies.put((msg_id, True, op))

    def recv_obj(self) -> Any:
        item = self.replies.get()
        if isinstance(item, Exception):
            raise item
        return item

    def cut(self) -> None:
        self.replies.put(RuntimeError("Connection closed by peer [127.0.0.1]:1234\nsecond line"))


@pytest.fixture
def stage() -> Any:
    s = FakeStage()
    yield s
    s.release.set()


def client(stage: FakeStage, proc: FakeProcess | None, deaths: list[str] | None = None) -> RpcClient:
    return RpcClient(1, stage, stage, proc, on_death=None if deaths is None else deaths.append)  # type: ignore[arg-type]


def test_a_send_that_never_returns_holds_no_caller_and_the_death_fails_the_call(stage: FakeStage) -> None:
    """The hang: a send to a stage that died before gloo noticed waited out gloo's 10 minutes on the
    caller's thread. The caller now only queues; the process's end fails the call, although neither
    link ever reports anything."""
    proc, deaths = FakeProcess(), []
    rpc = client(stage, proc, deaths)
    assert rpc.call_sync("stats") == "stats"
    stage.jammed.set()
    t0 = time.monotonic()
    futs = [rpc.submit("cache", "escrow", ()) for _ in range(3)]
    assert time.monotonic() - t0 < 1.0 and not any(f.done() for f in futs)
    proc.end(-9)
    for f in futs:
        with pytest.raises(StageDied, match="^stage 1 process was killed by SIGKILL$"):
            f.result(timeout=SOON_S)
    assert deaths == ["stage 1 process was killed by SIGKILL"]
    with pytest.raises(StageDied, match="stage 1"):       # later calls fail at once
        rpc.submit("stats").result(timeout=0)


def test_without_a_process_handle_a_broken_link_is_the_death(stage: FakeStage) -> None:
    """torchrun stages: no sentinel to watch; the replies link breaking fails every call, one line."""
    deaths: list[str] = []
    rpc = client(stage, None, deaths)
    stage.jammed.set()
    fut = rpc.submit("stats")
    stage.cut()
    with pytest.raises(StageDied) as err:
        fut.result(timeout=SOON_S)
    assert str(err.value) == "stage 1 process stopped answering: Connection closed by peer [127.0.0.1]:1234"
    assert deaths == [str(err.value)] and not rpc.alive


def test_an_orderly_shutdown_is_not_a_death(stage: FakeStage) -> None:
    proc, deaths = FakeProcess(), []
    rpc = client(stage, proc, deaths)
    assert rpc.call_sync("reset") == "reset"
    threading.Timer(0.2, proc.end, (0,)).start()       # the stage ends after its goodbye
    rpc.close(wait_s=SOON_S)
    assert stage.received == ["reset", "shutdown"] and deaths == []


def test_a_stage_that_does_not_say_goodbye_is_a_timeout_not_a_wait(stage: FakeStage) -> None:
    rpc = client(stage, FakeProcess())
    stage.jammed.set()
    with pytest.raises(TimeoutError):
        rpc.close(wait_s=0.5)


def test_a_reply_to_a_cancelled_call_leaves_the_client_alive(stage: FakeStage) -> None:
    """The caller gave up (an asyncio timeout cancels the future) before the reply came: the reply
    is dropped, not taken for a broken link."""
    rpc = client(stage, FakeProcess())
    stage.holding.set()
    fut = rpc.submit("stats")
    deadline = time.monotonic() + SOON_S
    while not stage.held and time.monotonic() < deadline:
        time.sleep(0.01)
    assert fut.cancel()
    stage.holding.clear()
    stage.replies.put(stage.held.pop())
    assert rpc.call_sync("reset") == "reset" and rpc.alive


def test_a_link_sender_keeps_order_and_skips_sends_already_failed() -> None:
    sender, done = LinkSender("test-link"), []
    gate = threading.Event()
    first: Future[None] = sender.submit(Future(), gate.wait)
    failed: Future[None] = Future()
    failed.set_exception(StageDied("stage 2 process was killed by SIGKILL"))
    sender.submit(failed, done.append, "skipped")
    last: Future[None] = sender.submit(Future(), done.append, "sent")
    gate.set()
    last.result(timeout=SOON_S)
    assert first.done() and done == ["sent"]
    sender.close()
