"""What an executor keeps per request: nothing from the arrival (a wave's chunks carry the prompt), and
nothing of a request forgotten while its step ran."""

from __future__ import annotations

import asyncio
from array import array

import pytest

from wavepp.runtime.engines.base import StageExecutor
from wavepp.runtime.engines.request_book import RequestBook
from wavepp.runtime.engines.sim.executor import SimExecutor, sim_first_token
from wavepp.runtime.request import Chunk


def chunk(rid: str, start: int = 0, length: int = 4, last: bool = True, tokens: array[int] | None = None) -> Chunk:
    return Chunk(rid, start, length, 0, last, 0, tokens)


def test_the_executor_contract_has_no_arrival_side_table() -> None:
    """A request's tokens reach stage 0 in its chunks: no executor is told of an arrival."""
    assert "register" not in StageExecutor.__dict__ and "forget" in StageExecutor.__dict__
    assert not hasattr(SimExecutor, "register") and not hasattr(RequestBook, "register")


def test_a_chunk_carries_its_prompt_by_reference_outside_the_descriptor() -> None:
    prompt = array("I", range(10))
    c = chunk("a", 4, 3, tokens=prompt)
    assert c.tokens is prompt and list(c.tokens[c.start:c.start + c.length]) == [4, 5, 6]
    assert c == chunk("a", 4, 3)          # the descriptor a stage checks is the same without them
    assert "tokens" not in repr(c)


def test_results_of_a_request_forgotten_while_its_step_runs_are_dropped() -> None:
    book = RequestBook()
    with book.running([chunk("a"), chunk("b")]):
        book.forget("a")                    # failed or cancelled meanwhile
        book.keep_first("a", 7)
        book.keep_first("b", 8)
        assert not book.live("a") and book.live("b")
    assert book.first_token("a") is None and book.first_token("b") == 8
    with book.running([chunk("a")]):        # a new attempt after the step ended: live again
        assert book.live("a")
    book.forget("b")
    assert book.first_token("b") is None


def test_a_request_running_on_two_stages_stays_gone_until_both_steps_end() -> None:
    book = RequestBook()
    with book.running([chunk("a")]):
        with book.running([chunk("a", 4)]):
            book.forget("a")
        assert not book.live("a")           # the other stage's step still runs
    assert book.live("a")


def test_the_sim_takes_its_first_token_from_the_last_chunk_on_the_last_stage() -> None:
    from wavepp.runtime.engines.sim.costmodel import ChunkShape

    class Flat:
        num_stages = 2

        def step_time(self, stage: int, chunks: list[ChunkShape]) -> float:
            return 0.0

        def step_times(self, chunks: list[ChunkShape]) -> list[float]:
            return [0.0, 0.0]

        def transfer_time(self, stage: int, tokens: int) -> float:
            return 0.0

    prompt = array("I", [5, 9, 2, 7, 1, 3, 8, 4])
    sim = SimExecutor(Flat())    # type: ignore[arg-type]

    async def go() -> None:
        await sim.execute(0, 0, [chunk("a", 0, 4, last=False, tokens=prompt)], {"a": [0]})
        await sim.execute(1, 0, [chunk("a", 0, 4, last=False, tokens=prompt)], {"a": [0]})
        assert sim.first_token("a") is None
        await sim.execute(0, 1, [chunk("a", 4, 4, tokens=prompt)], {"a": [0, 1]})
        assert sim.first_token("a") is None          # not before the last stage
        await sim.execute(1, 1, [chunk("a", 4, 4, tokens=prompt)], {"a": [0, 1]})
    asyncio.run(go())
    assert sim.first_token("a") == sim_first_token(prompt)


def test_stage_zero_refuses_a_chunk_without_its_tokens() -> None:
    torch_executor = pytest.importorskip("wavepp.runtime.engines.torch.executor")
    with pytest.raises(ValueError, match="chunk of a reached stage 0 without its tokens"):
        torch_executor.stage0_tokens([chunk("a")])
    assert torch_executor.stage0_tokens([chunk("a", 2, 2, tokens=array("I", [1, 2, 3, 4]))]) == [3, 4]
