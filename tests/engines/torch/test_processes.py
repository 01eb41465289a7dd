"""The torch engine with its stages as torch.distributed processes (gloo, spawned on this host, or
started by torchrun): exact against transformers, the same first tokens as the thread mode under
the shared loop, and a dead stage process is an error, never a hang."""

from __future__ import annotations

import asyncio
import ipaddress
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import torch

from wavepp.runtime.bench.runs import BenchConfig, run_one
from wavepp.runtime.cli import main
from wavepp.runtime.engines.config import TorchConfig
from wavepp.runtime.engines.torch.check import _reference, run_check
from wavepp.runtime.engines.torch.config import DecoderConfig
from wavepp.runtime.engines.torch.engine import TorchEngine
from wavepp.runtime.engines.torch.processes.leader import RemoteStageHandle, StageDied
from wavepp.runtime.engines.torch.weights import random_weights
from wavepp.runtime.kvcache.handle import LeaseItem
from wavepp.runtime.sources.workloads import Workload, parse_workload

ROOT = Path(__file__).resolve().parents[3]


def small(num_kv_heads: int = 2, **kw: object) -> DecoderConfig:
    base: dict[str, object] = dict(vocab_size=512, hidden_size=64, intermediate_size=128, num_layers=4,
                                   num_heads=4, num_kv_heads=num_kv_heads, max_position=2048)
    base.update(kw)
    return DecoderConfig(**base)  # type: ignore[arg-type]


# (pp, block, chunk, reuse, kv heads): every pp of a 4-layer model, both block sizes, no reuse /
# reuse on a block boundary / ending mid-block, GQA ratios 4, 2 and 1 (MHA).
MATRIX = [(2, 16, 24, 40, 2), (3, 4, 5, 8, 1), (4, 16, 64, 0, 4), (2, 4, 7, 11, 4), (3, 16, 16, 37, 2)]


@pytest.mark.parametrize(("pp", "block", "chunk", "reuse", "kv_heads"), MATRIX)
def test_process_stages_match_transformers(pp: int, block: int, chunk: int, reuse: int, kv_heads: int) -> None:
    r = run_check(small(num_kv_heads=kv_heads), pp=pp, block_size=block, chunk=chunk, reuse=reuse, seed=pp + block,
                  launcher="spawn")
    assert r.ok, r


def test_process_stages_moe_match_transformers() -> None:
    cfg = small(num_layers=2, model_type="qwen2_moe", num_experts=4, experts_per_token=2, moe_intermediate_size=32,
                shared_expert_intermediate_size=48)
    r = run_check(cfg, pp=2, block_size=4, chunk=6, reuse=9, seed=5, launcher="spawn")
    assert r.ok, r


def test_process_and_thread_modes_agree_with_the_reference(tmp_path: Path) -> None:
    """One short bench per policy in each mode: every request completes with the reference's first token."""
    cfg_path = tmp_path / "config.json"
    cfg = small()
    cfg_path.write_text(json.dumps(cfg.to_hf_dict()))
    bench = BenchConfig(parse_workload("reuse90"), [4], ["wavepp", "trtllm-pp"], 10, seed=1, prompt_tokens=160)
    bench.knobs = bench.knobs.replace(max_wave_tokens=128, min_wave_tokens=64, static_chunk_tokens=64)
    first: dict[str, dict[str, int | None]] = {}
    spawned = TorchConfig(str(cfg_path), pp=2, block_size=16, kv_blocks=[300, 200], seed=3, launcher="spawn")
    with TorchEngine(spawned) as engine:
        for policy in bench.policies:
            rec = run_one(engine, bench, policy, 4)          # run_one checks every stage's cache after the run
            assert rec.figures.completed == 10 and rec.figures.failed == 0, rec.loop.failures
            assert isinstance(rec.parts.handles[1], RemoteStageHandle)
            first[policy] = {c.request_id: c.first_token for c in rec.loop.completions}
            stats = asyncio.run(rec.parts.handles[1].stats())   # the stage process's own cache
            assert stats.num_blocks == 200 and stats.num_cached > 0 and stats.num_leases == 0
    threads = TorchEngine(TorchConfig(str(cfg_path), pp=2, block_size=16, kv_blocks=[300, 200], seed=3))
    rec = run_one(threads, bench, "wavepp", 4)
    assert {c.request_id: c.first_token for c in rec.loop.completions} == first["wavepp"] == first["trtllm-pp"]
    reference = _reference(cfg, cfg.to_hf_dict(), random_weights(cfg, 3))
    prompts = Workload(bench.workload, 10, 160, 16, cfg.vocab_size, 1)
    for req in (prompts.next_request(0.0) for _ in range(10)):
        with torch.inference_mode():
            want = int(reference(torch.tensor(list(req.tokens))[None]).logits[0, -1].argmax())
        assert first["wavepp"][req.id] == want, req.id


def test_a_dead_stage_process_is_an_error_not_a_hang() -> None:
    engine = TorchEngine(TorchConfig("tiny-llama", pp=2, block_size=16, kv_blocks=[64], launcher="spawn"))
    try:
        parts = engine.build()
        remote = parts.handles[1]
        assert isinstance(remote, RemoteStageHandle)
        assert asyncio.run(remote.lease([LeaseItem("r", [1, 2, 3], 0, 40)])) == [0]
        proc = remote.rpc._proc
        assert proc is not None
        proc.kill()
        proc.join(10)

        async def after_death() -> None:
            await asyncio.wait_for(remote.escrow([("r", 3)]), timeout=60)

        with pytest.raises(StageDied, match="^stage 1 process was killed by SIGKILL$"):
            asyncio.run(after_death())
    finally:
        engine.close()


def stopped_stage(engine: TorchEngine) -> tuple[RemoteStageHandle, Any]:
    """Build ``engine`` and SIGSTOP its stage 1 process: alive, receiving nothing. (handle, process)"""
    remote = engine.build().handles[1]
    assert isinstance(remote, RemoteStageHandle)
    proc = remote.rpc._proc
    assert proc is not None and proc.pid is not None
    os.kill(proc.pid, signal.SIGSTOP)
    return remote, proc


def test_a_stuck_stage_process_holds_no_caller_and_its_death_fails_the_calls() -> None:
    """A stage that stops receiving (SIGSTOP) makes gloo's send to it wait out the group timeout -
    as one killed before gloo saw its socket close did, 1 run in 4 on a loaded machine. The caller's
    own timeout still fires (no send on the event loop's thread); the kill then fails every call
    within seconds, naming the stage."""
    engine = TorchEngine(TorchConfig("tiny-llama", pp=2, block_size=16, kv_blocks=[64], launcher="spawn"))
    try:
        remote, proc = stopped_stage(engine)
        # The safety net for a regression: a send stuck on this thread wakes when the stage is killed.
        net = threading.Timer(60, os.kill, (proc.pid, signal.SIGKILL))
        net.start()

        async def stuck() -> None:
            await asyncio.wait_for(asyncio.gather(*(remote.stats() for _ in range(3))), timeout=3)

        t0 = time.monotonic()
        with pytest.raises(TimeoutError):
            asyncio.run(stuck())
        assert time.monotonic() - t0 < 30, "a send to the stopped stage held the caller"
        net.cancel()
        calls = [remote.rpc.submit("cache", "stats", ()) for _ in range(3)]
        os.kill(proc.pid, signal.SIGKILL)
        for call in calls:
            with pytest.raises(StageDied, match="^stage 1 process was killed by SIGKILL$"):
                call.result(timeout=30)
    finally:
        engine.close()


def test_torchrun_launches_the_check(tmp_path: Path) -> None:
    torchrun = Path(sys.executable).with_name("torchrun")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    out = subprocess.run([str(torchrun), "--nproc-per-node", "2", "-m", "wavepp", "check-engine",
                          "--model", "tiny-llama", "--pp", "2", "--launcher", "torchrun"],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "-> OK" in out.stdout


def test_torchrun_launcher_outside_torchrun_is_one_line(capsys: pytest.CaptureFixture[str],
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("TORCHELASTIC_RUN_ID", "LOCAL_WORLD_SIZE"):
        monkeypatch.delenv(var, raising=False)
    assert main(["check-engine", "--launcher", "torchrun"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "torchrun" in err[0], err


def test_stage_processes_idle_past_the_link_timeout_still_serve(monkeypatch: pytest.MonkeyPatch,
                                                                tmp_path: Path) -> None:
    """A server idle longer than gloo's limit on one receive (10 minutes; 3 s here) used to lose its
    stages: every link waiting for its next message timed out. The leader's keepalive keeps them busy."""
    monkeypatch.setenv("WAVEPP_DIST_TIMEOUT_S", "3")
    cfg_path = tmp_path / "config.json"
    cfg_path.write_text(json.dumps(small().to_hf_dict()))
    bench = BenchConfig(parse_workload("reuse90"), [2], ["wavepp"], 4, seed=1, prompt_tokens=160)
    bench.knobs = bench.knobs.replace(max_wave_tokens=128, min_wave_tokens=64)
    with TorchEngine(TorchConfig(str(cfg_path), pp=3, block_size=16, kv_blocks=[300], launcher="spawn")) as engine:
        assert run_one(engine, bench, "wavepp", 2).figures.completed == 4
        time.sleep(8)                                   # every link idle for over twice its limit
        rec = run_one(engine, bench, "wavepp", 2)
        assert rec.figures.completed == 4 and rec.figures.failed == 0, rec.loop.failures


def test_a_call_unanswered_past_the_link_timeout_fails_the_stage(monkeypatch: pytest.MonkeyPatch) -> None:
    """The keepalive keeps the reply link busy, so gloo's timeout no longer ends a stage that is alive but
    stuck; the leader does: a call unanswered for the link timeout (3 s here) fails with StageDied."""
    monkeypatch.setenv("WAVEPP_DIST_TIMEOUT_S", "3")
    engine = TorchEngine(TorchConfig("tiny-llama", pp=2, block_size=16, kv_blocks=[64], launcher="spawn"))
    proc = None
    try:
        remote, proc = stopped_stage(engine)
        call = remote.rpc.submit("cache", "stats", ())
        with pytest.raises(StageDied, match=r"^stage 1 process did not answer a call within 3 s \(stopped or stuck; "
                                            r"\$WAVEPP_DIST_TIMEOUT_S sets the limit\)$"):
            call.result(timeout=30)
    finally:
        if proc is not None and proc.pid is not None:
            os.kill(proc.pid, signal.SIGKILL)
        engine.close(orderly=False)


def _process_tree(root: int) -> list[int]:
    """``root`` and every process under it (from /proc: the suite has no psutil)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue                                   # ended meanwhile
            children.setdefault(int(stat.rsplit(")", 1)[1].split()[1]), []).append(int(entry))
    tree, todo = [], [root]
    while todo:
        pid = todo.pop()
        tree.append(pid)
        todo += children.get(pid, [])
    return tree


def _listening(pids: list[int]) -> set[tuple[str, int]]:
    """(address, port) of every listening TCP socket the processes ``pids`` hold (/proc/net/tcp[6])."""
    inodes = set()
    for pid in pids:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if link.startswith("socket:["):
                inodes.add(link[len("socket:["):-1])
    found = set()
    for table, family in (("/proc/net/tcp", socket.AF_INET), ("/proc/net/tcp6", socket.AF_INET6)):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            (address, port), state, inode = fields[1].split(":"), fields[3], fields[9]
            if state == "0A" and inode in inodes:                        # 0A: LISTEN
                raw = bytes.fromhex(address)                             # 32-bit words in host order
                words = [raw[i:i + 4][::-1] if sys.byteorder == "little" else raw[i:i + 4]
                         for i in range(0, len(raw), 4)]
                found.add((socket.inet_ntop(family, b"".join(words)), int(port, 16)))
    return found


def _loopback(address: str) -> bool:
    ip = ipaddress.ip_address(address)
    mapped = getattr(ip, "ipv4_mapped", None)
    return ip.is_loopback or bool(mapped and mapped.is_loopback)


def test_every_socket_of_a_spawned_world_listens_on_loopback_only() -> None:
    """Every stage is on this host, yet the rendezvous store (torch's TCPStore, started by
    init_method=tcp://127.0.0.1:…) listened on every interface ("*:PORT"): now it listens on
    127.0.0.1, and gloo's links on the loopback interface (GLOO_SOCKET_IFNAME; without it gloo takes
    the address the hostname resolves to, which on this machine is 127.0.0.1 anyway)."""
    before = _listening(_process_tree(os.getpid()))
    engine = TorchEngine(TorchConfig("tiny-llama", pp=2, block_size=16, kv_blocks=[64], launcher="spawn"))
    try:
        remote = engine.build().handles[1]
        assert isinstance(remote, RemoteStageHandle) and remote.rpc._proc is not None
        assert asyncio.run(remote.lease([LeaseItem("r", [1, 2, 3], 0, 40)])) == [0]   # the links carry a call
        tree = _process_tree(os.getpid())
        assert remote.rpc._proc.pid in tree
        opened = _listening(tree) - before
        assert len(opened) >= 2, opened                     # the store, and gloo's listeners
        assert all(_loopback(address) for address, _ in opened), sorted(opened)
        environ = Path(f"/proc/{remote.rpc._proc.pid}/environ").read_bytes().split(b"\0")
        assert b"GLOO_SOCKET_IFNAME=lo" in environ
    finally:
        engine.close()


def _exits_at_start(rank: int, size: int, init_method: str, cuda: bool) -> None:
    """A stage process that ends before the rendezvous (a failed import, a missing device)."""
    os._exit(3)


def test_a_stage_that_ends_before_joining_fails_the_start_at_once() -> None:
    """Rank 0 used to wait out gloo's timeout (10 minutes) in the rendezvous; now the first stage
    process to end fails it within a poll, naming the stage and how it ended."""
    from wavepp.runtime.engines.torch.processes.launch import StageStartFailed, spawn_stages
    t0 = time.monotonic()
    with pytest.raises(StageStartFailed, match=r"^stage 1 process exited with code 3 before it joined the others$"):
        spawn_stages(2, False, target=_exits_at_start)          # one stage: which ends first is not a race
    assert time.monotonic() - t0 < 60

