"""Admission rounds: hint -> lease -> escrow over several stages."""

from __future__ import annotations

import asyncio
import random

from wavepp.runtime.admission import Admission
from wavepp.runtime.control.index_publisher import IndexPublisher
from wavepp.runtime.kvcache.handle import StageHandle
from wavepp.runtime.kvcache.hashing import block_hashes, token_array
from wavepp.runtime.kvcache.priming import prime
from wavepp.runtime.kvcache.stage_cache import StageCache
from wavepp.runtime.mechanisms.reuse_lookup import FirstStageTree, HintIndex
from wavepp.runtime.request import Request
from wavepp.store.memory import MemoryStore
from wavepp.telemetry import names as N
from wavepp.telemetry.setup import Telemetry

B = 4


class CountingHandle(StageHandle):
    """Counts messages to the stage (one per admission step per round is the contract)."""

    calls: dict[str, int]

    def __init__(self, cache: StageCache) -> None:
        super().__init__(cache)
        self.calls = {}

    async def _charge(self, op: str, blocks: int, remote: bool = True) -> None:
        self.calls[op] = self.calls.get(op, 0) + 1


def make_request(rid: str, seed: int, num_blocks: int) -> Request:
    rng = random.Random(seed)
    tokens = token_array([rng.randrange(1000) for _ in range(num_blocks * B)])
    return Request(rid, tokens, 0.0, block_hashes(tokens, B))


def setup(capacities: list[int]) -> tuple[list[CountingHandle], MemoryStore, Telemetry]:
    handles = [CountingHandle(StageCache(s, n, B)) for s, n in enumerate(capacities)]
    return handles, MemoryStore(), Telemetry(lambda: 0.0, 0)


async def warm(handles: list[CountingHandle], store: MemoryStore, req: Request) -> None:
    for h in handles:
        prime(h.cache, "warm-" + req.id, req.block_hashes, req.num_tokens)
    await IndexPublisher(handles, store).flush()


def test_lease_falls_back_when_one_stage_evicted_after_the_hint() -> None:
    async def main() -> None:
        handles, store, tel = setup([32, 32, 8, 32])
        doc = make_request("doc", 1, 8)
        await warm(handles, store, doc)
        # Stage 2 (8 blocks) evicts 5 blocks of the document for another prompt; the index has
        # not heard of it yet (no publish), so the hint still says 7 everywhere.
        other = make_request("other", 2, 5)
        prime(handles[2].cache, "other", other.block_hashes, other.num_tokens)
        adm = Admission(handles, range(4), store, B, tel, HintIndex())
        req = make_request("r", 1, 8)          # same tokens as the document
        result = await adm.round([req])
        [a] = result.admitted
        assert a.reuse_blocks == 3             # 8 - 5 evicted, not the hinted 7
        assert req.fallbacks == 1
        for h in handles:                      # every stage holds exactly [0, 3)
            assert h.cache.leases["r"].reuse_blocks == 3
            assert h.cache.progress["r"] == 3 * B
            h.cache.check()
        lease_span = next(s for s in tel.finished_spans() if s.name == N.LEASE)
        assert lease_span.attributes[N.FALLBACKS] == 1  # type: ignore[index]

    asyncio.run(main())


def test_a_round_batches_requests_into_one_message_per_stage_per_step() -> None:
    async def main() -> None:
        handles, store, tel = setup([64] * 3)
        adm = Admission(handles, range(3), store, B, tel, HintIndex())
        result = await adm.round([make_request(f"r{i}", i, 3) for i in range(5)])
        assert len(result.admitted) == 5 and not result.deferred
        for h in handles:
            assert h.calls == {"lease": 1, "escrow": 1}

    asyncio.run(main())


def test_escrow_backpressure_defers_in_order_and_releases_what_waiting_requests_held() -> None:
    async def main() -> None:
        handles, store, tel = setup([16, 16, 7])
        adm = Admission(handles, range(3), store, B, tel, HintIndex())
        reqs = [make_request(f"r{i}", i, 3) for i in range(4)]     # 3 blocks each; stage 2 fits 2
        result = await adm.round(reqs)
        assert [a.id for a in result.admitted] == ["r0", "r1"]
        assert [r.id for r in result.deferred] == ["r2", "r3"]
        for h in handles:
            assert set(h.cache.leases) == {"r0", "r1"} and set(h.cache.tickets) == {"r0", "r1"}
            h.cache.check()

    asyncio.run(main())


def test_without_the_hint_index_stage_zero_alone_decides_reuse() -> None:
    """The baseline path: stage 0's own tree gives k; only stage 0 leases and escrows."""
    async def main() -> None:
        handles, store, tel = setup([32, 4, 32])
        doc = make_request("doc", 1, 6)
        prime(handles[0].cache, "warm", doc.block_hashes, doc.num_tokens)   # only stage 0 has it
        adm = Admission(handles, [0], store, B, tel, FirstStageTree())
        [a] = (await adm.round([make_request("r", 1, 6)])).admitted
        assert a.reuse_blocks == 5
        assert "r" not in handles[1].cache.leases and "r" not in handles[2].cache.leases

    asyncio.run(main())


def test_a_hint_read_while_an_index_flush_settles_is_read_again() -> None:
    """A producer's blocks land in the index and leave ``computing`` while a round's hint is out: judged with
    the stale hint, the request would go ahead from block 0 and compute the whole document again."""
    async def main() -> None:
        handles, _, tel = setup([64] * 2)
        doc = make_request("doc", 1, 8)
        computing, settles = set(doc.block_hashes), [0]

        class FlushDuringLookup(MemoryStore):
            calls = 0

            async def hint_lookup(self, prompts, stages):  # type: ignore[no-untyped-def]
                stale = await super().hint_lookup(prompts, stages)
                FlushDuringLookup.calls += 1
                if FlushDuringLookup.calls == 1:        # the producer completes; the flush settles its blocks
                    await warm(handles, self, doc)
                    computing.clear()
                    settles[0] += 1
                return stale

        adm = Admission(handles, range(2), FlushDuringLookup(), B, tel, HintIndex())
        req = make_request("r", 1, 8)                   # the same document
        [a] = (await adm.round([req], computing=computing, settles=lambda: settles[0])).admitted
        assert FlushDuringLookup.calls == 2
        assert a.reuse_blocks == 7                      # all but the block that gives the first token

    asyncio.run(main())
