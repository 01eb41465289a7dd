"""Rank 0's side of the stage processes: remote stage handles, the stage processes as one world
(a dead stage fails it), the process executor. Messages to a stage go through ``rpc.RpcClient``.

The shared loop never knows: a :class:`RemoteStageHandle` is a ``StageHandle`` whose every
operation is one message to the stage that owns the cache (so ``on_stages`` sends an admission
round's lease to all stages at once), and :class:`ProcessExecutor` runs stage 0 here and the
other stages through their processes, activations going stage to stage directly.
"""

from __future__ import annotations

import asyncio
import dataclasses
import threading
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from multiprocessing.process import BaseProcess
from typing import Any, TypeVar

import torch
from torch import Tensor

from wavepp.runtime.engines.request_book import RequestBook
from wavepp.runtime.engines.torch.executor import stage0_tokens
from wavepp.runtime.engines.torch.model import StageModel
from wavepp.runtime.engines.torch.processes.launch import TIMEOUT_ENV, World, join_torchrun, link_timeout, spawn_stages
from wavepp.runtime.engines.torch.processes.rpc import (
    CLOSE_WAIT_S,
    LINK_BREAK_WAIT_S,
    LinkSender,
    RpcClient,
    StageDied,
    fail,
)
from wavepp.runtime.engines.torch.processes.stage_server import Keys, StageSpec, run_chunks, serve_stage
from wavepp.runtime.kvcache.handle import Escrowed, LeaseItem, Materialized, MaterializeItem, StageHandle
from wavepp.runtime.kvcache.stage_cache import CacheStats
from wavepp.runtime.request import Chunk, Wave

T = TypeVar("T")
KEEPALIVES_PER_TIMEOUT = 4    # every link hears something this many times within gloo's timeout


class RemoteStageHandle(StageHandle):
    """A stage whose cache lives in another process: each operation is one message there."""

    def __init__(self, stage: int, rpc: RpcClient, capacity: int) -> None:  # no local cache
        self.stage = stage
        self.rpc = rpc
        self._capacity = capacity
        self._costs = None                     # real messages: real time

    @property
    def capacity(self) -> int:
        return self._capacity

    @property
    def resume_step(self) -> int:
        return 1                               # the torch engine's models have attention layers only

    def set_snapshot_interval(self, tokens: int) -> None:
        return None                            # (no state layers: nothing to set)

    @property
    def mirrored(self) -> bool:
        return False

    @property
    def remote(self) -> bool:
        return True

    @property
    def suspends(self) -> bool:
        return True

    async def _op(self, name: str, *args: Any) -> Any:
        return await self.rpc.call("cache", name, args)

    async def lookup_local(self, prompts: Sequence[list[int]], limits: Sequence[int],
                           remote: bool = True) -> list[int]:
        return await self._op("lookup_local", list(prompts), list(limits))  # type: ignore[no-any-return]

    async def lease(self, items: Sequence[LeaseItem], remote: bool = True) -> list[int]:
        return await self._op("lease", list(items))  # type: ignore[no-any-return]

    async def shrink(self, items: Sequence[tuple[str, int]], remote: bool = True) -> list[int]:
        return await self._op("shrink", list(items))  # type: ignore[no-any-return]

    async def escrow(self, items: Sequence[tuple[str, int]], remote: bool = True,
                     held_prefix: bool = False) -> Escrowed:
        return await self._op("escrow", list(items), True, held_prefix)  # type: ignore[no-any-return]

    async def release(self, request_ids: Sequence[str], remote: bool = True) -> int:
        return await self._op("release", list(request_ids))  # type: ignore[no-any-return]

    async def materialize_many(self, items: Sequence[MaterializeItem]) -> Materialized:
        return await self._op("materialize_many", list(items))  # type: ignore[no-any-return]

    async def complete_many(self, items: Sequence[tuple[str, list[int]]]) -> list[list[int]]:
        return await self._op("complete_many", list(items))  # type: ignore[no-any-return]

    async def store_many(self, items: Sequence[tuple[str, list[int], int]]) -> None:
        await self._op("store_many", list(items))

    async def drain_index_updates(self) -> tuple[list[int], list[int]]:
        return await self._op("drain_index_updates")  # type: ignore[no-any-return]

    async def requeue_index_updates(self, attached: list[int], detached: list[int]) -> None:
        await self._op("requeue_index_updates", attached, detached)

    async def index_snapshot(self) -> list[int]:
        return await self._op("index_snapshot")  # type: ignore[no-any-return]

    async def stats(self) -> CacheStats:
        return await self._op("stats")  # type: ignore[no-any-return]

    async def check(self) -> None:
        await self._op("check")

    async def return_sample_state(self) -> None:
        """The last stage's first tokens already came back to rank 0 with the wave: nothing more."""

    async def host_iteration(self, pending: Sequence[list[int]], copied_tokens: int, num_active: int) -> int:
        return await self._op("host_iteration", list(pending), copied_tokens, num_active)  # type: ignore[no-any-return]

    async def receive_requests(self, num_tokens: int) -> None:
        """Baselines: nothing to relay - a stage-local lease carries the request's block hashes
        to the stage in the lease message itself (its cost is in that message)."""


class StageProcesses:
    """Ranks 1..P-1 as seen from rank 0: started (spawn) or joined (torchrun), built, reset, closed.

    The first stage found dead fails the world: every call to any stage and every send on the link
    to stage 1 fails with that stage's one line. (A neighbour blocked on a link to the dead stage
    could otherwise wait out gloo's timeout, and the run with it.)
    """

    def __init__(self, pp: int, launcher: str, cuda: bool) -> None:
        procs: list[BaseProcess] = []
        if launcher == "spawn":
            self.world, procs = spawn_stages(pp, cuda, serve_stage)
        else:
            self.world = join_torchrun(cuda)
            if self.world.size != pp:
                self.world.leave()
                raise ValueError(f"torchrun started {self.world.size} processes for pp={pp}: they must be equal")
        self._lock = threading.Lock()
        self._died: str | None = None          # the first dead stage's line
        self._sends: set[Future[Any]] = set()  # sends to stage 1 not done yet
        self._to_stage1 = LinkSender("to-stage1-data")
        self.rpcs: dict[int, RpcClient] = {}
        for s in range(1, pp):
            self.rpcs[s] = RpcClient(s, self.world.commands[s], self.world.replies[s],
                                     procs[s - 1] if procs else None, on_death=self._stage_died)
        self._closed = False
        self._stop = threading.Event()
        self._keeper = threading.Thread(target=self._keepalive, name="stage-keepalive", daemon=True)
        self._keeper.start()

    def _keepalive(self) -> None:
        """gloo gives up on a receive after ``link_timeout()``, also on a link that is only idle (a
        server without requests): every stage's receivers would fail after 10 quiet minutes. So a
        quarter of that apart, each stage is pinged (its command link and its reply) and passes a
        keepalive to the next stage (the data links), and stage 1 gets one from here. A dead stage
        shows through the calls as before."""
        limit = link_timeout().total_seconds()
        while not self._stop.wait(limit / KEEPALIVES_PER_TIMEOUT) and self.healthy:
            for rpc in self.rpcs.values():
                rpc.overdue(limit)                 # alive but stuck: its pings are answered, its step never
                rpc.submit("ping")
            if self.world.size > 1:
                self.send_to_stage1(self.world.data[0].keepalive)

    @property
    def healthy(self) -> bool:
        """No stage process has died."""
        return self._died is None

    def _stage_died(self, why: str) -> None:
        with self._lock:
            if self._died is not None:
                return
            self._died = why
            sends, self._sends = self._sends, set()
        for rpc in list(self.rpcs.values()):
            rpc.fail(why)
        for fut in sends:
            fail(fut, StageDied(why))

    def send_to_stage1(self, fn: Callable[..., None], *args: Any) -> Future[None]:
        """Run ``fn(*args)`` (a send on the data link to stage 1) on that link's sending thread, after
        the sends before it. The future fails with StageDied as soon as a stage is found dead."""
        fut: Future[None] = Future()
        with self._lock:
            if self._died is not None:
                fut.set_exception(StageDied(self._died))
                return fut
            self._sends.add(fut)
        fut.add_done_callback(lambda f: self._sends.discard(f))
        return self._to_stage1.submit(fut, fn, *args)

    def build(self, specs: dict[int, StageSpec]) -> None:
        """Every stage builds its layers and pool at once (weights are made or read in each process)."""
        for f in [self.rpcs[s].submit("build", spec) for s, spec in specs.items()]:
            f.result()

    def reset(self, sizes: Sequence[int]) -> None:
        """A new run: each stage process an empty cache of ``sizes[stage]`` blocks."""
        for f in [rpc.submit("reset", sizes[s]) for s, rpc in self.rpcs.items()]:
            f.result()

    async def blame(self, step: Awaitable[T]) -> T:
        """Await a step that uses a link between stages. A link breaks when the process at its other
        end died: the error then names that stage and how it ended (StageDied), not gloo's
        ``Connection closed by peer`` seen from its neighbour."""
        try:
            return await step
        except StageDied:
            raise
        except RuntimeError as exc:
            for rpc in self.rpcs.values():
                cause = rpc.exit_cause(wait_s=0.5)
                if cause is not None:
                    raise StageDied(f"stage {rpc.stage} process {cause}") from exc
            if "Timed out" in str(exc):         # gloo's own limit: every process alive, one not answering
                raise StageDied(f"a link between stages timed out after {link_timeout().total_seconds():g} s "
                                f"(a stage process stopped or stuck; ${TIMEOUT_ENV} sets the limit)") from exc
            raise

    def close(self, orderly: bool = True) -> None:
        """Stop every stage process: orderly (each drains its links and says goodbye), or - after a
        stage died, on an interrupt, or when a goodbye does not come in time - killed at once."""
        if self._closed:
            return
        self._closed = True
        self._stop.set()
        self._keeper.join(timeout=CLOSE_WAIT_S)
        if not (orderly and self.healthy and self._shut_down()):
            for rpc in self.rpcs.values():
                rpc.kill()
        self._to_stage1.close(wait_s=LINK_BREAK_WAIT_S)   # no send may return from gloo as the interpreter ends
        self.world.leave()

    def _shut_down(self) -> bool:
        try:
            # Stage 1's inbound thread ends; each stage passes the end on to the next.
            self.send_to_stage1(self.world.data[0].close).result(timeout=CLOSE_WAIT_S)
            for rpc in self.rpcs.values():
                rpc.close()
        except (StageDied, TimeoutError):
            return False
        return True


class ProcessExecutor(RequestBook):
    """Stage 0 in this process (its own compute thread), stages 1..P-1 in theirs.

    ``transfer(s, wave)`` sends the wave's activations from stage s to s+1 over their link and
    returns when the send is done; stage s+1's ``execute`` waits for them on its side.
    """

    def __init__(self, stage0: StageModel, procs: StageProcesses, max_context: int, keep_logits: bool = False) -> None:
        super().__init__(keep_logits)
        self.stage0, self.procs = stage0, procs
        self.num_stages = procs.world.size
        self.max_context = max_context
        self._outputs: dict[int, tuple[Keys, Tensor]] = {}
        self._compute = ThreadPoolExecutor(1, thread_name_prefix="stage0")

    def reset(self, sizes: Sequence[int]) -> None:
        """A new run: every stage starts with an empty cache (``sizes[stage]`` blocks) and nothing in flight."""
        self.procs.reset(sizes)
        self.clear()
        self._outputs.clear()

    async def execute(self, stage: int, wave_id: int, chunks: Sequence[Chunk], tables: dict[str, list[int]]) -> None:
        with self.running(chunks):
            if stage == 0:
                inputs = torch.tensor(stage0_tokens(chunks), dtype=torch.long, device=self.stage0.device)
                done = await asyncio.wrap_future(self._compute.submit(
                    run_chunks, self.stage0, self._outputs, wave_id, inputs, chunks, tables, self.keep_logits))
            else:       # the descriptors alone: a later stage needs no prompt
                bare = [dataclasses.replace(c, tokens=None) for c in chunks]
                done = await self.procs.blame(self.procs.rpcs[stage].call(
                    "exec", wave_id, bare, {c.request_id: tables[c.request_id] for c in chunks}, self.keep_logits))
            for rid, (token, logits) in (done or {}).items():
                self.keep_first(rid, token, logits)

    async def transfer(self, stage: int, wave: Wave) -> None:
        if stage == 0:
            keys, out = self._outputs.pop(wave.id, ([], torch.empty(0, self.stage0.cfg.hidden_size)))
            await self.procs.blame(asyncio.wrap_future(
                self.procs.send_to_stage1(self.procs.world.data[0].send_tensor, (wave.id, keys), out)))
        else:
            await self.procs.blame(self.procs.rpcs[stage].call("transfer", wave.id))

    def gather_kv(self, stage: int, layer: int, table: list[int], num_tokens: int) -> tuple[Tensor, Tensor]:
        if stage == 0:
            k, v = self.stage0.gather_kv(layer, table, num_tokens)
            return k.float().cpu(), v.float().cpu()
        return self.procs.rpcs[stage].call_sync("gather_kv", layer, table, num_tokens)  # type: ignore[no-any-return]

    def close(self, orderly: bool = True) -> None:
        """Stop stage 0's compute thread and every stage process (``orderly=False``, or after a stage
        died: kill them at once, and wait for no thread)."""
        orderly = orderly and self.procs.healthy
        if not orderly:
            self.procs.close(orderly=False)
        self._compute.shutdown(wait=orderly)
        self.procs.close()


def start_processes(specs: Sequence[StageSpec], launcher: str, device: torch.device,
                    keep_logits: bool = False) -> ProcessExecutor:
    """Start (or join) ranks 1..P-1, have each build its stage of ``specs``, build stage 0 here."""
    procs = StageProcesses(len(specs), launcher, device.type == "cuda")
    try:
        procs.build({s: spec for s, spec in enumerate(specs) if s > 0})
        return ProcessExecutor(specs[0].build(0, device), procs, specs[0].cfg.max_position, keep_logits)
    except BaseException:
        procs.close()
        raise


__all__ = ["ProcessExecutor", "RemoteStageHandle", "RpcClient", "StageDied", "StageProcesses", "World",
           "start_processes"]
