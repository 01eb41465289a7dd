"""Rank 0's side of the stage processes: RPC clients, remote stage handles, the process executor.

The shared loop never knows: a :class:`RemoteStageHandle` is a ``StageHandle`` whose every
operation is one message to the stage that owns the cache (so ``on_stages`` sends an admission
round's lease to all stages at once), and :class:`ProcessExecutor` runs stage 0 here and the
other stages through their processes, activations going stage to stage directly.
"""

from __future__ import annotations

import asyncio
import itertools
import signal
import threading
from array import array
from collections.abc import Awaitable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from multiprocessing.process import BaseProcess
from typing import Any, TypeVar

import torch
from torch import Tensor

from runtime.engines.base import LeaseItem, Materialized, MaterializeItem, StageHandle
from runtime.engines.torch.dist.launch import World, join_torchrun, spawn_stages
from runtime.engines.torch.dist.stage_server import Keys, StageSpec, run_chunks
from runtime.engines.torch.dist.wire import Link
from runtime.engines.torch.executor import RequestBook
from runtime.engines.torch.model import StageModel
from runtime.kvcache.stage_cache import CacheStats, DescriptorMismatch
from runtime.request import Chunk, Request, Wave

T = TypeVar("T")


class StageDied(RuntimeError):
    """A stage process died or its link broke; the message names the stage and the cause."""


class RpcClient:
    """Commands to one stage process and its replies, matched by message id.

    Callers send (under a lock, in submission order), one thread receives; a reply resolves a thread-safe future,
    so the same client serves the asyncio loop (:meth:`call`) and plain code (:meth:`call_sync`).
    """

    def __init__(self, stage: int, commands: Link, replies: Link, proc: BaseProcess | None = None) -> None:
        self.stage = stage
        self._commands, self._replies, self._proc = commands, replies, proc
        self._ids = itertools.count()
        self._pending: dict[int, Future[Any]] = {}
        self._lock = threading.Lock()          # the pending table
        self._send_lock = threading.Lock()
        self._dead: str | None = None
        self._closing = -1
        self._reader = threading.Thread(target=self._read, name=f"from-stage{stage}", daemon=True)
        self._reader.start()

    def submit(self, op: str, *args: Any) -> Future[Any]:
        fut: Future[Any] = Future()
        with self._send_lock:                  # one sender at a time, messages in call order
            with self._lock:
                if self._dead is not None:
                    fut.set_exception(StageDied(self._dead))
                    return fut
                msg_id = next(self._ids)
                self._pending[msg_id] = fut
                if op == "shutdown":
                    self._closing = msg_id
            # Not under self._lock: a send may wait for the stage to receive while the stage waits
            # for our reader to take a reply; the reader needs only self._lock.
            try:
                self._commands.send_obj((msg_id, op, args))
            except RuntimeError as exc:        # gloo: the connection is gone
                self._die(f"stage {self.stage} process {self.exit_cause() or f'is gone: {exc}'}")
        return fut

    async def call(self, op: str, *args: Any) -> Any:
        return await asyncio.wrap_future(self.submit(op, *args))

    def call_sync(self, op: str, *args: Any) -> Any:
        return self.submit(op, *args).result()

    def _read(self) -> None:
        try:
            while True:
                msg_id, ok, value = self._replies.recv_obj()
                with self._lock:
                    fut = self._pending.pop(msg_id)
                if ok:
                    fut.set_result(value)
                else:
                    fut.set_exception(value)
                if msg_id == self._closing:
                    return
        except Exception as exc:          # the process died or the link broke: nothing will answer
            self._die(f"stage {self.stage} process {self.exit_cause() or f'stopped answering: {exc}'}")

    def exit_cause(self, wait_s: float = 1.0) -> str | None:
        """How a spawned stage process ended ("was killed by SIGKILL", "exited with code 1"), if it did
        within ``wait_s`` (a link breaks as its process goes: give it a moment)."""
        if self._proc is None:
            return None
        self._proc.join(timeout=wait_s)
        code = self._proc.exitcode
        if code is None:
            return None
        if code < 0:
            try:
                return f"was killed by {signal.Signals(-code).name}"
            except ValueError:
                return f"was killed by signal {-code}"
        return f"exited with code {code}"

    def _die(self, why: str) -> None:
        why = why.splitlines()[0]
        with self._lock:
            self._dead = self._dead or why
            pending, self._pending = self._pending, {}
        for fut in pending.values():
            if not fut.done():
                fut.set_exception(StageDied(self._dead))

    @property
    def alive(self) -> bool:
        return self._dead is None

    def kill(self) -> None:
        """Stop a spawned stage process without a word (after another stage died)."""
        self._die(f"stage {self.stage} stopped: another stage process died")
        if self._proc is not None:
            self._proc.kill()
            self._proc.join(timeout=30)

    def close(self) -> None:
        try:
            self.call_sync("shutdown")
        except StageDied:
            pass
        self._reader.join(timeout=30)
        if self._proc is not None:
            self._proc.join(timeout=30)
            if self._proc.is_alive():
                self._proc.kill()


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
    def suspends(self) -> bool:
        return True

    async def _op(self, name: str, *args: Any) -> Any:
        return await self.rpc.call("cache", name, args)

    async def lookup_local(self, prompts: Sequence[list[int]], limits: Sequence[int],
                           remote: bool = True) -> list[int]:
        return await self._op("lookup_local", list(prompts), list(limits))  # type: ignore[no-any-return]

    async def lease(self, items: Sequence[LeaseItem], remote: bool = True) -> list[int]:
        return await self._op("lease", list(items))  # type: ignore[no-any-return]

    async def shrink(self, items: Sequence[tuple[str, int]], remote: bool = True) -> None:
        await self._op("shrink", list(items))

    async def escrow(self, items: Sequence[tuple[str, int]], remote: bool = True) -> int:
        return await self._op("escrow", list(items))  # type: ignore[no-any-return]

    async def release(self, request_ids: Sequence[str], remote: bool = True) -> int:
        return await self._op("release", list(request_ids))  # type: ignore[no-any-return]

    async def materialize_many(self, items: Sequence[MaterializeItem]) -> Materialized:
        return await self._op("materialize_many", list(items))  # type: ignore[no-any-return]

    async def complete_many(self, items: Sequence[tuple[str, list[int]]]) -> list[list[int]]:
        return await self._op("complete_many", list(items))  # type: ignore[no-any-return]

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
    """Ranks 1..P-1 as seen from rank 0: started (spawn) or joined (torchrun), built, reset, closed."""

    def __init__(self, pp: int, launcher: str, cuda: bool) -> None:
        procs: list[BaseProcess] = []
        if launcher == "spawn":
            self.world, procs = spawn_stages(pp, cuda)
        else:
            self.world = join_torchrun(cuda)
            if self.world.size != pp:
                self.world.leave()
                raise ValueError(f"torchrun started {self.world.size} processes for pp={pp}: they must be equal")
        self.rpcs = {s: RpcClient(s, self.world.commands[s], self.world.replies[s], procs[s - 1] if procs else None)
                     for s in range(1, pp)}
        self._closed = False

    def build(self, specs: dict[int, StageSpec]) -> None:
        """Every stage builds its layers and pool at once (weights are made or read in each process)."""
        for f in [self.rpcs[s].submit("build", spec) for s, spec in specs.items()]:
            f.result()

    def reset(self) -> None:
        for f in [rpc.submit("reset") for rpc in self.rpcs.values()]:
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
            raise

    def close(self, orderly: bool = True) -> None:
        """Stop every stage process: orderly (each drains its links and says goodbye), or - after a
        stage died, or on an interrupt, when waves may be stuck mid-link - killed at once."""
        if self._closed:
            return
        self._closed = True
        if orderly and all(rpc.alive for rpc in self.rpcs.values()):
            if 0 in self.world.data:
                self.world.data[0].close()     # stage 1's inbound thread ends; each stage passes it on
            for rpc in self.rpcs.values():
                rpc.close()
        else:                                  # a stage died: no orderly shutdown, stop the rest
            for rpc in self.rpcs.values():
                rpc.kill()
        self.world.leave()


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
        self._send = ThreadPoolExecutor(1, thread_name_prefix="stage0-send")

    def reset(self) -> None:
        """A new run: every stage starts with an empty cache and nothing in flight."""
        self.procs.reset()
        self.clear()
        self._outputs.clear()

    async def execute(self, stage: int, wave_id: int, chunks: Sequence[Chunk], tables: dict[str, list[int]]) -> None:
        if stage == 0:
            ids = [t for c in chunks for t in self._tokens[c.request_id][c.start:c.start + c.length]]
            inputs = torch.tensor(ids, dtype=torch.long, device=self.stage0.device)
            done = await asyncio.wrap_future(self._compute.submit(
                run_chunks, self.stage0, self._outputs, wave_id, inputs, chunks, tables, self.keep_logits))
        else:
            done = await self.procs.blame(self.procs.rpcs[stage].call(
                "exec", wave_id, list(chunks), {c.request_id: tables[c.request_id] for c in chunks}, self.keep_logits))
        for rid, (token, logits) in (done or {}).items():
            self._first[rid] = token
            if logits is not None:
                self._logits[rid] = logits

    async def transfer(self, stage: int, wave: Wave) -> None:
        if stage == 0:
            keys, out = self._outputs.pop(wave.id, ([], torch.empty(0, self.stage0.cfg.hidden_size)))
            await self.procs.blame(asyncio.wrap_future(
                self._send.submit(self.procs.world.data[0].send_tensor, (wave.id, keys), out)))
        else:
            await self.procs.blame(self.procs.rpcs[stage].call("transfer", wave.id))

    def gather_kv(self, stage: int, layer: int, table: list[int], num_tokens: int) -> tuple[Tensor, Tensor]:
        if stage == 0:
            k, v = self.stage0.gather_kv(layer, table, num_tokens)
            return k.float().cpu(), v.float().cpu()
        return self.procs.rpcs[stage].call_sync("gather_kv", layer, table, num_tokens)  # type: ignore[no-any-return]

    def close(self, orderly: bool = True) -> None:
        """Stop stage 0's threads and every stage process (``orderly=False``: kill them at once)."""
        if not orderly:                        # first: a thread blocked on a dead link ends with the link
            self.procs.close(orderly=False)
        self._compute.shutdown(wait=orderly)
        self._send.shutdown(wait=orderly)
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


__all__ = ["ProcessExecutor", "RemoteStageHandle", "RpcClient", "StageDied", "StageProcesses", "World", "start_processes"]
