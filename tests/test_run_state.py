"""The run state: each transition of a request's path, and the questions stages ask of it."""

from __future__ import annotations

import ast
import asyncio
from array import array
from pathlib import Path

from wavepp.runtime.request import AdmittedRequest, Chunk, Request, Wave
from wavepp.runtime.run_state import RunState

B = 16


def req(rid: str, tokens: int = 64) -> Request:
    return Request(rid, array("I", range(tokens)), 0.0, list(range(tokens // B)))


def admit(r: Request, reuse_blocks: int = 0) -> AdmittedRequest:
    r.attempts += 1
    return AdmittedRequest(r, reuse_blocks, 0.0, B, attempt=r.attempts)


def test_a_round_admits_from_the_head_and_deferred_requests_keep_their_place() -> None:
    async def go() -> None:
        run = RunState(2)
        for rid in "abcd":
            run.arrive(req(rid))
        batch = run.take(3)
        assert [r.id for r in batch] == ["a", "b", "c"] and run.num_waiting == 1
        woke = asyncio.create_task(run.changed.wait())
        await asyncio.sleep(0)
        run.admitted([admit(batch[0])], deferred=batch[1:])
        await asyncio.wait_for(woke, 1)             # an admission wakes the dispatcher
        assert [a.id for a in run.active()] == ["a"]
        assert run.head() is not None and run.head().id == "b"      # type: ignore[union-attr]
        assert [r.id for r in run.take(10)] == ["b", "c", "d"]
        assert run.num_admitted == 1
    asyncio.run(go())


def test_planning_schedules_chunks_and_retiring_frees_the_slot() -> None:
    async def go() -> None:
        run = RunState(2)
        run.arrive(req("a", 64))
        [r] = run.take(1)
        run.admitted([admit(r, reuse_blocks=1)], [])
        a = run.get("a")
        assert a is not None and a.scheduled == B
        w0 = Wave(0, [Chunk("a", 16, 32, 1, False, a.attempt)], 4096, 0.0)
        w1 = Wave(1, [Chunk("a", 48, 16, 1, True, a.attempt)], 4096, 0.0)
        run.planned(w0)
        run.planned(w1)
        assert run.in_flight == 2 and run.num_planned == 2 and a.remaining == 0
        assert not run.completes_ahead(1) and run.completes_ahead(2)   # only w1 finishes the request
        assert run.computed(w0.chunks) == [] and run.computed(w1.chunks) == [a]
        assert a.completed == 64
        run.retired(w0)
        assert run.in_flight == 1 and not run.completes_ahead(1)
    asyncio.run(go())


def test_stage_0_finishing_a_wave_wakes_the_dispatcher_only_while_it_holds_one() -> None:
    """The backlog of stage 0 is what it has not finished; a wave stage 0 finishes notifies ``changed`` only
    while the dispatcher holds a small wave (``wake_on_first_stage``): no other policy's dispatcher wakes more."""
    async def go() -> None:
        run = RunState(2)
        for i in range(3):
            run.planned(Wave(i, [], 4096, 0.0))
        assert run.first_stage_backlog == 3

        async def woken(stage: int) -> bool:
            wait = asyncio.create_task(run.changed.wait())
            await asyncio.sleep(0)
            run.stage_passed(stage)
            await asyncio.sleep(0)
            done = wait.done()
            wait.cancel()
            return done

        assert not await woken(0)
        assert run.first_stage_backlog == 2
        run.wake_on_first_stage = True
        assert not await woken(1)                   # a later stage's pass is no reason to plan
        assert await woken(0)
        assert run.first_stage_backlog == 1
    asyncio.run(go())


def test_a_chunk_of_a_dropped_attempt_is_stale_after_the_request_comes_back() -> None:
    async def go() -> None:
        run = RunState(2)
        r = req("a")
        run.arrive(r)
        run.admitted([first := admit(run.take(1)[0], 2)], [])
        old = Chunk("a", 32, 32, 2, True, first.attempt)
        assert run.live(old) is first and run.holds(first)
        run.drop(first)
        run.requeue(r)                          # a late fallback puts it back at the head
        assert run.live(old) is None and not run.holds(first)
        run.admitted([second := admit(run.take(1)[0], 0)], [])
        assert run.live(old) is None            # the old attempt's chunk stays stale
        assert run.live(Chunk("a", 0, 64, 0, True, second.attempt)) is second
        assert run.pending_first_chunks() == [r.block_hashes]     # admitted, nothing scheduled yet
    asyncio.run(go())


def test_a_request_whose_last_chunk_ran_is_completing_and_no_longer_cancellable() -> None:
    async def go() -> None:
        run = RunState(2)
        run.arrive(req("a"))
        run.admitted([a := admit(run.take(1)[0], 0)], [])
        wave = Wave(0, [Chunk("a", 0, 64, 0, True, a.attempt)], 64, 0.0)
        run.planned(wave)
        assert run.cancellable("a") is a and run.may_end(a)
        assert run.computed(wave.chunks) == [a]       # the last stage ran its last chunk
        assert run.cancellable("a") is None and not run.may_end(a) and run.holds(a)
        run.drop(a)                                   # its completion takes it out
        assert run.get("a") is None and run.num_active == 0
    asyncio.run(go())


def test_only_a_live_last_chunk_ahead_promises_room() -> None:
    async def go() -> None:
        run = RunState(2)
        for rid in ("a", "b"):
            run.arrive(req(rid))
        run.admitted([a := admit(run.take(1)[0], 0), admit(run.take(1)[0], 0)], [])
        run.planned(Wave(0, [Chunk("a", 0, 64, 0, True, a.attempt)], 64, 0.0))
        run.planned(Wave(1, [Chunk("b", 0, 64, 0, True, 1)], 64, 0.0))
        assert run.completes_ahead(1)
        run.drop(a)                                   # a failed: its last chunk ahead frees nothing
        assert not run.completes_ahead(1)
    asyncio.run(go())


def test_it_knows_when_admitted_requests_follow_different_policies() -> None:
    async def go() -> None:
        run = RunState(2)
        for rid in ("a", "b"):
            run.arrive(req(rid))
        first = admit(run.take(1)[0], 0)
        run.admitted([first], [])
        assert not run.admitted_under_others(first.policy)
        other = admit(run.take(1)[0], 0)
        other.policy = "trtllm-pp"
        run.admitted([other], [])
        assert run.admitted_under_others("wavepp") and run.admitted_under_others("trtllm-pp")
        run.drop(other)
        assert not run.admitted_under_others("wavepp")
    asyncio.run(go())


def test_stage_completion_and_mechanism_code_never_see_the_loop_object() -> None:
    """The narrow interface: the stage tasks, completion and every mechanism get the run state and
    their own ports; none imports the loop module."""
    root = Path(__file__).resolve().parents[1] / "runtime"
    files = [root / "stage_tasks.py", root / "completion.py", root / "run_state.py", root / "admission.py",
             *sorted((root / "mechanisms").glob("*.py"))]
    for f in files:
        tree = ast.parse(f.read_text())
        imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
        assert "wavepp.runtime.loop" not in imported, f"{f.name} imports wavepp.runtime.loop"
        assert "PipelineLoop" not in f.read_text(), f"{f.name} names PipelineLoop"
    # A request source (wavepp serve's) gets a LoopPort, not the loop.
    source = ast.parse((root / "sources" / "server.py").read_text())
    assert "wavepp.runtime.loop" not in {n.module for n in ast.walk(source) if isinstance(n, ast.ImportFrom)}
