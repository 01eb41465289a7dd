"""The process world of the torch engine: rank 0 leads (loop, admission, store, stage 0), rank s
hosts stage s (its KV pool and its cache: lease and escrow happen there).

Launchers:

- ``spawn``: this process is rank 0 and starts ranks 1..P-1 on this host (``torch.multiprocessing``
  spawn context); every socket of the world listens on loopback only (:func:`spawn_stages`);
- ``torchrun``: every rank is started by ``torchrun`` (one host or several); rank 0 runs the
  command, the others serve their stage (``wavepp.runtime.cli`` hands them to :func:`serve_stage`).

Links (one process group each, created in the same order on every rank)::

    commands[s]  0 -> s      replies[s]  s -> 0      data[s]  s -> s+1 (activations + descriptors)
"""

from __future__ import annotations

import datetime
import os
import signal
import socket
import threading
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from multiprocessing.process import BaseProcess
from urllib.parse import urlsplit

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.distributed import Store, TCPStore  # type: ignore[attr-defined]  # exported at run time, not in the stubs

from wavepp.runtime.engines.launchers import LAUNCHERS
from wavepp.runtime.engines.torch.processes.wire import Link

__all__ = ["LAUNCHERS", "StageStartFailed", "World", "describe_exit", "join_torchrun", "link_timeout", "spawn_stages",
           "threads_per_process", "torchrun_rank"]
TIMEOUT_ENV = "WAVEPP_DIST_TIMEOUT_S"   # gloo's limit on one send or receive (tests shorten it)


RENDEZVOUS_S = 600.0   # how long ranks wait for each other at start (spawned ranks import torch first)


def link_timeout() -> datetime.timedelta:
    """How long one send or receive on a link may take: 10 minutes, or ``$WAVEPP_DIST_TIMEOUT_S``
    seconds. A link idle that long would time out too; the leader's keepalive (leader.py) keeps
    every link busier than that."""
    return datetime.timedelta(seconds=float(os.environ.get(TIMEOUT_ENV) or 600))


@dataclass(slots=True)
class World:
    rank: int
    size: int
    device: torch.device
    commands: dict[int, Link] = field(default_factory=dict)
    replies: dict[int, Link] = field(default_factory=dict)
    data: dict[int, Link] = field(default_factory=dict)

    @classmethod
    def join(cls, rank: int, size: int, init_method: str, cuda: bool, store: Store | None = None) -> World:
        """Rendezvous and create every link (all ranks call this with the same size and cuda).
        ``init_method``: ``env://`` (torchrun), or ``tcp://127.0.0.1:PORT`` (spawned), where rank 0
        hosts the rendezvous ``store`` itself (:func:`loopback_store`) and the others are its clients."""
        if cuda:
            local = int(os.environ.get("LOCAL_RANK", rank)) % torch.cuda.device_count()
            torch.cuda.set_device(local)
            device = torch.device("cuda", local)
        else:
            device = torch.device("cpu")
        timeout = link_timeout()
        # The rendezvous waits for every rank to start, whatever the link timeout: a test that shortens
        # the links to seconds must not fail because a spawned rank took longer to import torch.
        meet = max(timeout, datetime.timedelta(seconds=RENDEZVOUS_S))
        if store is None and init_method.startswith("tcp://"):
            # Not init_method=: rank 0 passes its store, and torch prefixes the keys of a store made
            # from an init_method ("default_pg/") but not of one passed in; both sides pass one.
            where = urlsplit(init_method)
            store = TCPStore(where.hostname or "127.0.0.1", where.port or 0, size, False, meet)
        if store is not None:
            dist.init_process_group("gloo", store=store, rank=rank, world_size=size, timeout=meet)
        else:
            dist.init_process_group("gloo", init_method=init_method, rank=rank, world_size=size, timeout=meet)
        dist.barrier()                  # every rank is up: the links below connect at once
        world = cls(rank, size, device)
        for s in range(1, size):
            g_cmd, g_rep = dist.new_group([0, s], timeout=timeout), dist.new_group([0, s], timeout=timeout)
            world.commands[s] = Link(0, s, g_cmd, g_cmd)
            world.replies[s] = Link(s, 0, g_rep, g_rep)
        for s in range(size - 1):
            g_obj = dist.new_group([s, s + 1], timeout=timeout)
            g_act = dist.new_group([s, s + 1], backend="nccl", timeout=timeout) if cuda else g_obj
            world.data[s] = Link(s, s + 1, g_obj, g_act)
        return world

    def leave(self) -> None:
        if dist.is_initialized():
            dist.destroy_process_group()


def loopback_store(size: int) -> tuple[TCPStore, int]:
    """Rank 0's rendezvous store, listening on 127.0.0.1 only, and its port. ``tcp://`` (and
    ``env://``) start a TCPStore that listens on every interface whatever host they name, so the
    store gets a socket bound here (which also leaves no gap between choosing the port and binding it)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.bind(("127.0.0.1", 0))
        sock.listen(size)
        port = int(sock.getsockname()[1])
        meet = max(link_timeout(), datetime.timedelta(seconds=RENDEZVOUS_S))
        store = TCPStore("127.0.0.1", port, size, True, meet, wait_for_workers=False,
                         master_listen_fd=sock.fileno())
    except BaseException:
        sock.close()
        raise
    sock.detach()                      # the store owns the descriptor now
    return store, port


def keep_links_local(cuda: bool) -> None:
    """Gloo's (and NCCL's bootstrap) listeners on the loopback interface, unless the operator chose
    one (the variable is set). Without it gloo listens on the address the hostname resolves to and
    NCCL on the first non-loopback interface: reachable from the network although every rank is
    here. Set in this process's environment for good: the stages inherit it, and NCCL reads its
    variable when the first activation goes out, after the rendezvous."""
    names = {name for _, name in socket.if_nameindex()}
    loopback = next((n for n in ("lo", "lo0") if n in names), "lo")
    for var in ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME") if cuda else ("GLOO_SOCKET_IFNAME",):
        os.environ.setdefault(var, loopback)


JOIN_POLL_S = 0.1


class StageStartFailed(RuntimeError):
    """A stage process ended before it joined the world (its one line says how)."""


def spawn_stages(size: int, cuda: bool,
                 target: Callable[[int, int, str, bool], None]) -> tuple[World, list[BaseProcess]]:
    """Start ranks 1..size-1 on this host and join as rank 0. A stage process that ends before the
    rendezvous completes fails it at once (``StageStartFailed``) instead of leaving rank 0 waiting out
    gloo's timeout. Every rank is on this host, so nothing of the world listens beyond loopback:
    neither the rendezvous store (:func:`loopback_store`) nor the links (:func:`keep_links_local`).
    ``target``: the workers' entry point, ``(rank, size, init_method, cuda)`` (the stage server's
    ``serve_stage``; a test's stand-in)."""
    keep_links_local(cuda)
    store, port = loopback_store(size)
    init_method = f"tcp://127.0.0.1:{port}"          # the stages connect to rank 0's store as clients
    ctx = mp.get_context("spawn")
    procs: list[BaseProcess] = [ctx.Process(target=target, args=(rank, size, init_method, cuda),
                                            daemon=True, name=f"wavepp-stage{rank}") for rank in range(1, size)]
    for p in procs:
        p.start()
    joined: Future[World] = Future()

    def join() -> None:
        try:
            joined.set_result(World.join(0, size, init_method, cuda, store=store))
        except BaseException as exc:       # noqa: BLE001 - handed to the waiting thread
            joined.set_exception(exc)

    # The rendezvous blocks in C; it waits on a thread of its own while this one watches the stages.
    threading.Thread(target=join, name="stage-rendezvous", daemon=True).start()
    try:
        while True:
            try:
                return joined.result(timeout=JOIN_POLL_S), procs
            except FutureTimeout:
                pass
            for rank, p in enumerate(procs, start=1):
                if p.exitcode is not None:
                    how = describe_exit(p.exitcode)
                    raise StageStartFailed(f"stage {rank} process {how} before it joined the others")
    except BaseException:
        for p in procs:
            p.kill()
        raise


def describe_exit(code: int) -> str:
    """A process's exit code in words: 'exited with code 1', 'was killed by SIGKILL'."""
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with code {code}"


def torchrun_rank() -> tuple[int, int] | None:
    """(rank, world size) when started by torchrun, else None."""
    if "TORCHELASTIC_RUN_ID" not in os.environ and "LOCAL_WORLD_SIZE" not in os.environ:
        return None
    return int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])


def join_torchrun(cuda: bool) -> World:
    ranks = torchrun_rank()
    if ranks is None:
        raise ValueError("--launcher torchrun: start the command with torchrun (RANK/WORLD_SIZE are not set)")
    rank, size = ranks
    return World.join(rank, size, "env://", cuda)


def threads_per_process(size: int) -> int:
    """Intra-op threads per stage process: the host's cores split between the stages it runs."""
    local = int(os.environ.get("LOCAL_WORLD_SIZE", size))
    return max(1, (os.cpu_count() or 1) // max(1, local))
