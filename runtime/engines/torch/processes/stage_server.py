"""A stage process: owns one stage's layers, KV pool and cache, and serves the leader.

Threads (each link has exactly one sender and one receiver thread)::

    main      commands from the leader -> cache operations, answered at once (admission never
              waits behind compute); exec/transfer go to the compute thread in order
    compute   waits for the wave's activations from stage s-1, runs the forward, keeps the output
    inbound   receives activation packets from stage s-1 (descriptors + one tensor per wave)
    outbound  sends activation packets to stage s+1

Only the main thread touches the cache; the compute thread touches only the model and its KV pool
(through the block tables the leader's materialize returned).
"""

from __future__ import annotations

import os
import pickle
import signal
import sys
import threading
from collections import deque
from collections.abc import Coroutine, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from wavepp.runtime.engines.torch.config import DecoderConfig
from wavepp.runtime.engines.torch.model import ChunkSpec, StageModel, split_layers
from wavepp.runtime.engines.torch.processes.launch import World, threads_per_process
from wavepp.runtime.engines.torch.weights import load_hf_dir, random_weights
from wavepp.runtime.kvcache.handle import StageHandle
from wavepp.runtime.kvcache.stage_cache import StageCache
from wavepp.runtime.request import Chunk

CACHE_OPS = frozenset({"lookup_local", "lease", "shrink", "escrow", "release", "materialize_many", "complete_many",
                       "store_many", "host_iteration",
                       "drain_index_updates", "requeue_index_updates", "index_snapshot", "stats", "check"})


@dataclass(frozen=True, slots=True)
class StageSpec:
    """What a stage process builds: its layers of the model and a pool of ``num_blocks`` blocks."""

    cfg: DecoderConfig
    hf_dir: str | None          # weights from this directory, else seeded random ones
    seed: int
    pp: int
    num_blocks: int
    block_size: int
    dtype: str                  # "float32", "bfloat16"

    def build(self, stage: int, device: torch.device) -> StageModel:
        weights = load_hf_dir(self.hf_dir, self.cfg) if self.hf_dir else random_weights(self.cfg, self.seed)
        layers = split_layers(self.cfg.num_layers, self.pp)[stage]
        return StageModel(self.cfg, layers, stage == 0, stage == self.pp - 1, self.num_blocks, self.block_size,
                          weights, device, getattr(torch, self.dtype))


Keys = list[tuple[str, int, int, int]]      # (request, attempt, start, length) per chunk of a packet, in row order


def select_rows(keys: Keys, packet: Tensor, chunks: Sequence[Chunk]) -> Tensor:
    """The rows of ``chunks`` (in their order) out of a packet; rows of stale chunks are dropped."""
    rows, lo = {}, 0
    for rid, attempt, start, length in keys:
        rows[rid, attempt, start] = (lo, lo + length)
        lo += length
    parts = [packet[slice(*rows[c.request_id, c.attempt, c.start])] for c in chunks]
    return parts[0] if len(parts) == 1 else torch.cat(parts)


def run_chunks(model: StageModel, outputs: dict[int, tuple[Keys, Tensor]], wave_id: int, inputs: Tensor,
               chunks: Sequence[Chunk], tables: dict[str, list[int]],
               keep_logits: bool) -> dict[str, tuple[int, Tensor | None]] | None:
    """One stage step: forward, then keep the output for the transfer - or, on the last stage,
    return each finishing chunk's first token (argmax) and, when asked, its logits."""
    specs = [ChunkSpec(c.start, c.length, tables[c.request_id]) for c in chunks]
    with torch.inference_mode():
        out = model.forward_wave(inputs, specs)
    if not model.last:
        outputs[wave_id] = ([(c.request_id, c.attempt, c.start, c.length) for c in chunks], out)
        return None
    best = out.argmax(dim=-1).tolist()
    return {c.request_id: (int(t), out[i].float().cpu() if keep_logits else None)
            for i, (c, t) in enumerate(zip(chunks, best, strict=True)) if c.is_last}


def run_now(coro: Coroutine[Any, Any, Any]) -> Any:
    """Run a coroutine that never suspends (a local StageHandle without a cost hook) to its end."""
    try:
        coro.send(None)
    except StopIteration as stop:
        return stop.value
    coro.close()
    raise RuntimeError("a stage operation suspended inside a stage process")


def serve_stage(rank: int, size: int, init_method: str, cuda: bool) -> None:
    """Entry point of ranks 1..P-1 (spawned, or started by torchrun).

    Ctrl-C reaches every process of the terminal's group: a stage ignores it and the leader, which
    handles it, stops the stages (orderly, or by killing them). A leader that vanished (SIGKILL)
    breaks the links: the stage ends with one line instead of a gloo traceback, and no orphan is left.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    world = World.join(rank, size, init_method, cuda)
    torch.set_num_threads(threads_per_process(size))
    try:
        StageServer(world).serve()
    except RuntimeError:                        # gloo: the leader's link is gone
        # One write of the whole line: the stages share the terminal, and a print's separate write
        # of the newline lets two stages' lines run together.
        line = f"wavepp: stage {rank}: the leader is gone (its link closed), stopping\n"
        os.write(sys.stderr.fileno(), line.encode())
        os._exit(1)                             # the stage's own threads may still wait on dead links
    finally:
        world.leave()


class StageServer:
    def __init__(self, world: World) -> None:
        self.world = world
        self.stage = s = world.rank
        self.last = s == world.size - 1
        self.commands, self.replies = world.commands[s], world.replies[s]
        self.prev, self.next = world.data[s - 1], world.data.get(s)
        self.model: StageModel | None = None
        self.handle: StageHandle | None = None
        self.outputs: dict[int, tuple[Keys, Tensor]] = {}
        self.packets: deque[tuple[int, Keys, Tensor]] = deque()
        self.arrived = threading.Condition()
        self.inbound_open = True
        self._reply_lock = threading.Lock()      # answers come from the main and the compute thread
        self._compute = ThreadPoolExecutor(1, thread_name_prefix="compute")
        self._outbound = ThreadPoolExecutor(1, thread_name_prefix="outbound")
        self._inbound = threading.Thread(target=self._receive, name="inbound", daemon=True)
        self._inbound.start()

    # ---- main thread ---------------------------------------------------------------------------
    def serve(self) -> None:
        while True:
            msg_id, op, args = self.commands.recv_obj()
            if op == "shutdown":
                self._shutdown()
                self._reply(msg_id, True, None)
                return
            if op == "transfer":
                self._compute.submit(self._transfer, msg_id, *args)
            elif op in ("exec", "gather_kv"):
                self._compute.submit(self._answer, msg_id, getattr(self, op), args)
            else:
                self._answer(msg_id, self._control, (op, args))

    def _control(self, op: str, args: tuple[Any, ...]) -> Any:
        if op == "ping":                       # the leader's keepalive: this link, its reply, the next one
            if self.next is not None:
                self._outbound.submit(self.next.keepalive)
            return None
        if op == "build":
            spec: StageSpec = args[0]
            self.model = spec.build(self.stage, self.world.device)
            self.handle = StageHandle(StageCache(self.stage, spec.num_blocks, spec.block_size))
            return self.model.num_blocks
        if op == "reset":                      # a new run: an empty cache (the pool's contents are garbage)
            assert self.model is not None
            num_blocks = min(int(args[0]), self.model.num_blocks)   # a pool may use fewer than the KV tensor holds
            self.handle = StageHandle(StageCache(self.stage, num_blocks, self.model.block_size))
            self.outputs.clear()
            with self.arrived:
                self.packets.clear()
            return None
        if op == "cache":
            name, call_args = args
            if name not in CACHE_OPS or self.handle is None:
                raise ValueError(f"stage {self.stage}: unknown cache operation {name!r}")
            return run_now(getattr(self.handle, name)(*call_args))
        raise ValueError(f"stage {self.stage}: unknown command {op!r}")

    def _answer(self, msg_id: int, fn: Any, args: tuple[Any, ...]) -> None:
        try:
            value, ok = fn(*args), True
        except Exception as exc:           # goes back to the leader, which raises it there
            value, ok = exc, False
        self._reply(msg_id, ok, value)

    def _reply(self, msg_id: int, ok: bool, value: Any) -> None:
        with self._reply_lock:
            try:
                self.replies.send_obj((msg_id, ok, value))       # pickled whole before anything is sent
            except (pickle.PicklingError, TypeError, AttributeError) as exc:
                self.replies.send_obj((msg_id, False, RuntimeError(f"stage {self.stage}: unpicklable reply: {exc}")))

    def _shutdown(self) -> None:
        self._compute.shutdown()
        self._inbound.join()                   # the previous stage closed its link
        if self.next is not None:
            self._outbound.submit(self.next.close)
        self._outbound.shutdown()

    # ---- compute thread ------------------------------------------------------------------------
    def exec(self, wave_id: int, chunks: list[Chunk], tables: dict[str, list[int]],
             keep_logits: bool) -> dict[str, tuple[int, Tensor | None]] | None:
        """Run the wave's live chunks on the activations stage s-1 sent for it."""
        assert self.model is not None
        keys, packet = self._packet(wave_id)
        return run_chunks(self.model, self.outputs, wave_id, select_rows(keys, packet, chunks), chunks, tables,
                          keep_logits)

    def gather_kv(self, layer: int, table: list[int], num_tokens: int) -> tuple[Tensor, Tensor]:
        assert self.model is not None
        k, v = self.model.gather_kv(layer, table, num_tokens)
        return k.float().cpu(), v.float().cpu()

    def _packet(self, wave_id: int) -> tuple[Keys, Tensor]:
        """The packet of ``wave_id``; earlier ones nobody executed (every chunk went stale) are dropped."""
        with self.arrived:
            while True:
                while not self.packets:
                    if not self.inbound_open:
                        raise RuntimeError(f"stage {self.stage}: link from stage {self.stage - 1} closed")
                    self.arrived.wait()
                w, keys, t = self.packets.popleft()
                if w == wave_id:
                    return keys, t

    def _transfer(self, msg_id: int, wave_id: int) -> None:
        """Send the wave's output to stage s+1; the reply goes when the send is done."""
        assert self.next is not None and self.model is not None
        keys, out = self.outputs.pop(wave_id, ([], torch.empty(0, self.model.cfg.hidden_size)))
        sent = self._outbound.submit(self.next.send_tensor, (wave_id, keys), out)
        sent.add_done_callback(lambda f: self._reply(msg_id, f.exception() is None, f.exception()))

    # ---- inbound thread --------------------------------------------------------------------------
    def _receive(self) -> None:
        try:
            while True:
                meta, t = self.prev.recv_tensor(self.world.device)
                if meta is None or t is None:
                    return
                wave_id, keys = meta
                with self.arrived:
                    self.packets.append((wave_id, keys, t))
                    self.arrived.notify_all()
        except RuntimeError:                    # the link broke (a process died): closed, as far as we care
            return
        finally:
            with self.arrived:
                self.inbound_open = False
                self.arrived.notify_all()
