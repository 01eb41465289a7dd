"""The soak of issue "Reliability as a figure": the service under a bounded load for ``--minutes``, then
``--sim-requests`` requests on the sim; each figure against its target in ``--report`` (JSON, a .md twin).

**Service**: ``wavepp serve --engine torch --launcher spawn --pp 2 --max-queue 64 --span-ring 10000`` on a
private Redis; ``--clients`` closed-loop clients POST ``/v1/completions`` (``max_tokens`` 1; half the prompts one
of four 1,536-token prefixes + 64-512 new ids, half 64-2048 new ids). One in five has a client timeout of 5 ms-1 s;
run out, the client disconnects (the server cancels it): *cancelled*. 429: backpressure, counted, Retry-After
waited. Any other answer, or a connection error the client did not cause: *failed*. About every ``min(30 s,
warm-up / 4)``, at a sample, a knob changes (policy, ring, max_wave_tokens; the first ring and M the largest), due
200. Every ``--sample-s``: ``/v1/state`` and, from ``/proc``, RSS, threads, fds of the leader and each stage
process. *Warm-up*: the first 20% of the load; then the clients pause and close their connections, the server
drains (queued, outstanding, leases, escrow 0; 60 s at most), 3 s idle: the *baseline*. The load resumes; at its
end, the same drain: the *end*. *Memory growth* per process: (median RSS of the last 10% of the load samples, at
least 3 - median of the first as many after warm-up) / the latter, < 5%. *Leaked* asyncio tasks (leader),
threads, fds (each process): the end's less the baseline's, 0. Leases, escrowed blocks at the end, requests
failed: 0. SIGTERM: exit 0 within 60 s, last stderr line ``wavepp serve: stopped (...)``, no stage process alive
5 s later.

**Sim**: ``wavepp bench`` (:data:`SIM_BENCH`: virtual time, a ``docs`` workload on pools that evict, the
invariants checked after every wave and at the drain): every request completed, none failed, exit 0. Its
*memory growth* (median RSS over the last 10% of its wall time - median over 10-20%) / the latter is reported, not
a target: a bench keeps every span of its run for its figures. Exit 0: every target holds; 1: one is missed (each
named on stderr); 2: bad flags.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import select
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
SIM_BENCH = ["--engine", "sim", "--model", "llama-3-8b", "--hardware", "h200", "--pp", "2", "--concurrency", "64",
             "--prompt-tokens", "1024", "--workload", "docs:256:suffix=256", "--kv-blocks", "2048",
             "--policy", "wavepp", "--check-invariants", "--quiet"]
PREFIXES, PREFIX_TOKENS, GIVE_UP_SHARE, GIVE_UP_S = 4, 1536, 0.2, (0.005, 1.0)
COUNTS = ("sent", "answered", "cancelled", "refused_429", "failed", "given_timeout")
DRAIN_S, IDLE_S, STOP_S, GROWTH_MAX, SIM_SAMPLE_S = 60.0, 3.0, 60.0, 0.05, 0.5
TASK_READINGS, TASK_READING_GAP_S = 5, 0.2      # a drained server's asyncio tasks: the fewest of these readings
# The server's span ring (--span-ring) holds 200k spans by default, ~20 a request: full only after ~10k
# requests, more than 30 minutes serve here. A ring of 10k fills within the warm-up, so what grows after
# it is not the ring filling up (docs/faults.md).
SPAN_RING = 10_000


def read(path: str) -> str:
    try:
        return Path(path).read_text(errors="replace")
    except OSError:
        return ""


def proc_figures(pid: int) -> dict[str, int] | None:
    """RSS bytes, threads and open fds of ``pid`` (None: gone)."""
    try:
        return {"rss": int(read(f"/proc/{pid}/statm").split()[1]) * os.sysconf("SC_PAGE_SIZE"),
                "threads": len(os.listdir(f"/proc/{pid}/task")), "fds": len(os.listdir(f"/proc/{pid}/fd"))}
    except (OSError, IndexError):
        return None


def fd_names(pid: int) -> list[str]:
    """``pid``'s open fds: paths; TCP sockets as ``tcp:PEER_PORT``, or ``tcp-in:PORT`` when accepted on PORT."""
    rows = [p for net in ("tcp", "tcp6") for p in map(str.split, read(f"/proc/{pid}/net/{net}").splitlines()[1:])]
    listening = {p[1][-4:] for p in rows if p[3] == "0A"}
    peers = {p[9]: f"tcp-in:{int(p[1][-4:], 16)}" if p[1][-4:] in listening else f"tcp:{int(p[2][-4:], 16)}"
             for p in rows}
    try:
        links = [os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")]
    except OSError:
        return []
    return sorted(peers.get(link[8:-1], link) for link in links)


def stage_pids(leader: int) -> list[int]:
    """The leader's spawned stage processes (not multiprocessing's resource tracker)."""
    return sorted(int(p) for p in filter(str.isdigit, os.listdir("/proc"))
                  if read(f"/proc/{p}/stat").rsplit(")", 1)[-1].split()[1:2] == [str(leader)]
                  and "spawn_main" in (cmd := read(f"/proc/{p}/cmdline")) and "resource_tracker" not in cmd)


def alive(pid: int) -> bool:
    """Running or stopped, not a zombie."""
    return read(f"/proc/{pid}/stat").rsplit(")", 1)[-1].split()[:1] not in ([], ["Z"])


def until(done: Callable[[], bool], timeout_s: float, step_s: float = 0.1) -> float | None:
    """Poll ``done()`` until it holds: the seconds that took, or None once ``timeout_s`` passed."""
    t = time.monotonic()
    while not (ok := done()) and time.monotonic() - t < timeout_s:
        time.sleep(step_s)
    return round(time.monotonic() - t, 2) if ok else None


def growth(base: list[int], last: list[int]) -> float | None:
    b = statistics.median(base) if base else 0
    return (statistics.median(last) - b) / b if b > 0 and last else None


class Load:
    """Closed-loop clients, a thread each, and the knob changes. While ``go`` is clear no client holds a
    connection: the idle samples see none but the sampler's."""

    def __init__(self, url: str, model: str, clients: int, block_size: int) -> None:
        self.url, self.model, self.block_size, self.t0 = url, model, block_size, time.monotonic()
        rng, self.knob_rng = random.Random(0), random.Random(7)
        self.prefixes = [[rng.randint(1, 999) for _ in range(PREFIX_TOKENS)] for _ in range(PREFIXES)]
        self.counts, self.failures, self.knob_changes = Counter[str](), list[str](), list[dict[str, Any]]()
        self.lock, self.go, self.stop = threading.Lock(), threading.Event(), threading.Event()
        self.connected: set[int] = set()               # clients with an open connection pool
        self.go.set()
        for i in range(clients):
            threading.Thread(target=self.client, args=(i,), daemon=True).start()

    def count(self, what: str, failure: str | None = None, **more: int) -> None:
        with self.lock:
            self.counts.update({what: 1, **more})
            if failure is not None and len(self.failures) < 5:
                self.failures.append(failure[:500])

    def client(self, i: int) -> None:
        rng = random.Random(1000 + i)
        while not self.stop.is_set():
            if self.go.wait(0.2):
                self.connected.add(i)
                with httpx.Client(base_url=self.url) as http:
                    while self.go.is_set() and not self.stop.is_set():
                        self.request(http, rng)
                self.connected.discard(i)

    def request(self, http: httpx.Client, rng: random.Random) -> None:
        shared = rng.random() < 0.5
        prompt = (rng.choice(self.prefixes) if shared else []) + \
            [rng.randint(1, 999) for _ in range(rng.randint(64, 512 if shared else 2048))]
        give_up = rng.uniform(*GIVE_UP_S) if rng.random() < GIVE_UP_SHARE else None
        self.count("sent", given_timeout=give_up is not None)
        try:
            r = http.post("/v1/completions", json={"model": self.model, "prompt": prompt, "max_tokens": 1},
                          timeout=give_up or 300.0)
        except httpx.HTTPError as exc:       # a client that gave up disconnects: the server cancels the request
            gave_up = give_up is not None and isinstance(exc, httpx.TimeoutException)
            return self.count("cancelled" if gave_up else "failed", None if gave_up else f"{type(exc).__name__}: {exc}")
        what = {200: "answered", 429: "refused_429"}.get(r.status_code, "failed")
        self.count(what, f"{r.status_code}: {r.text}" if what == "failed" else None)
        if what == "refused_429":                        # backpressure: wait as told (5 s at most)
            self.stop.wait(min(float(r.headers.get("retry-after") or 1), 5.0))

    def change_knob(self, http: httpx.Client) -> None:
        """The next knob change, in turn: policy, ring, max_wave_tokens (the first ones their largest)."""
        turn, rng = len(self.knob_changes), self.knob_rng
        changes = [{"policy": ("trtllm-pp", "wavepp")[turn // 3 % 2]}, {"ring": rng.randint(0, 4) if turn > 2 else 4},
                   {"max_wave_tokens": rng.randrange(1024, 8193, self.block_size) if turn > 2 else 8192}][turn % 3]
        try:
            r = http.put("/v1/knobs", json={"changes": changes})
            status, text = r.status_code, r.text[:300]
        except httpx.HTTPError as exc:
            status, text = 0, f"{type(exc).__name__}: {exc}"
        self.knob_changes.append({"t": round(time.monotonic() - self.t0, 1), "changes": changes, "status": status,
                                  **({"text": text} if status != 200 else {})})

    def pause(self) -> None:                         # once no client holds a connection (requests in flight end)
        self.go.clear()
        until(lambda: not self.connected, 330, 0.05)


class Service:
    """Redis, then ``wavepp serve`` on it (:meth:`start`); :meth:`close` kills whatever still runs."""

    def __init__(self) -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = int(s.getsockname()[1])
        self.redis = subprocess.Popen(["redis-server", "--port", str(self.port), "--save", "", "--appendonly", "no",
                                       "--bind", "127.0.0.1"], stdout=subprocess.DEVNULL)
        self.stderr, self.t0 = tempfile.NamedTemporaryFile(), time.monotonic()
        self.samples, self.stages = list[dict[str, Any]](), list[int]()

    def start(self) -> None:
        until(lambda: self.redis.poll() is not None or subprocess.run(
            ["redis-cli", "-p", str(self.port), "ping"], capture_output=True).stdout.strip() == b"PONG", 10)
        server = self.server = subprocess.Popen[str](
            [sys.executable, "-m", "wavepp", "serve", "--port", "0", "--engine", "torch", "--launcher", "spawn",
             "--pp", "2", "--store", f"redis://127.0.0.1:{self.port}/0", "--max-queue", "64",
             "--span-ring", str(SPAN_RING)],
            stdout=subprocess.PIPE, stderr=self.stderr, text=True, cwd=ROOT,
            env={k: v for k, v in os.environ.items() if not k.startswith("OTEL_")})
        assert server.stdout is not None
        line = server.stdout.readline() if select.select([server.stdout], [], [], 180)[0] else ""
        self.info: dict[str, Any] = json.loads(line or "{}")      # {"listening": URL, "model": ...}
        self.http = httpx.Client(base_url=self.info.get("listening", "http://127.0.0.1:1"), timeout=30)
        if not line or until(lambda: server.poll() is not None or self.get("/ready") is not None, 180, 0.2) is None \
                or server.poll() is not None:
            raise RuntimeError(f"wavepp serve did not start: {read(self.stderr.name)[-2000:]}")
        self.stages = stage_pids(server.pid)

    def get(self, path: str) -> dict[str, Any] | None:
        try:
            r = self.http.get(path)
            return dict(r.json()) if r.status_code == 200 else None
        except (httpx.HTTPError, ValueError):
            return None

    def sample(self, phase: str) -> dict[str, Any]:
        s: dict[str, Any] = {"t": round(time.monotonic() - self.t0, 1), "phase": phase}
        if (state := self.get("/v1/state")) and "stages" in state:
            s.update(server=state["server"], tasks=state["process"]["tasks"], stages=state["stages"])
        pids = {"leader": self.server.pid, **{f"stage-process-{i + 1}": p for i, p in enumerate(self.stages)}}
        s["procs"] = {name: proc_figures(pid) for name, pid in pids.items()}
        if phase in ("baseline", "end"):                 # what a leaked fd is
            s["fd_names"] = {name: fd_names(pid) for name, pid in pids.items()}
            # The fewest tasks over a few readings: a task that lives for one request or one status write
            # (the reading's own included) is not a leak, and a leaked one is there at every reading.
            for _ in range(TASK_READINGS - 1):
                time.sleep(TASK_READING_GAP_S)
                if "tasks" in s and (again := self.get("/v1/state")) and "process" in again:
                    s["tasks"] = min(s["tasks"], again["process"]["tasks"])
        self.samples.append(s)
        return s

    def drain(self) -> float | None:
        """Seconds until queued, outstanding, leases and escrow are 0 (None: not within DRAIN_S), then idle."""
        def drained() -> bool:
            st = self.get("/v1/state")
            return bool(st and st["server"]["queued"] == st["server"]["outstanding"] == 0 and st.get("stages")
                        and all(s["leases"] == s["escrowed"] == 0 for s in st["stages"]))
        took = until(drained, DRAIN_S)
        time.sleep(IDLE_S)
        return took

    def stop(self) -> dict[str, Any]:
        """SIGTERM: the exit code, how long it took, the last stderr line, stage processes alive 5 s later."""
        server = self.server
        self.stages = sorted(set(self.stages) | set(stage_pids(server.pid)))   # a restarted stage too
        self.http.close()
        server.send_signal(signal.SIGTERM)
        took = until(lambda: server.poll() is not None, STOP_S)
        until(lambda: not any(map(alive, self.stages)), 5)
        lines = [ln for ln in read(self.stderr.name).splitlines() if ln.strip()]
        return {"exit_code": server.returncode, "stop_s": took, "last_stderr_line": lines[-1] if lines else "",
                "stages_alive": sum(map(alive, self.stages)), "stage_pids": self.stages}

    def close(self) -> None:
        for proc in (p for p in (getattr(self, "server", None), self.redis) if p is not None):
            proc.kill()                                  # nothing, once it exited
            proc.wait()
        for pid in filter(alive, self.stages):
            os.kill(pid, signal.SIGKILL)


def run_service(args: argparse.Namespace) -> dict[str, Any]:
    svc, load, drain_s, duration = Service(), None, {}, args.minutes * 60
    warm_s = max(0.2 * duration, args.sample_s)
    knob_every = max(1, round(min(30.0, warm_s / 4) / args.sample_s))      # samples from one knob change to the next
    try:
        svc.start()
        knobs = svc.get("/v1/knobs") or {}
        load = Load(svc.info["listening"], svc.info["model"], args.clients, knobs["deployment"]["block_size"])
        t_load = time.monotonic()
        for end_s, phase, then in ((warm_s, "warm-up", "baseline"), (duration, "load", "end")):
            while (left := end_s - (time.monotonic() - t_load)) > 0:
                time.sleep(min(args.sample_s, left))
                if len(svc.samples) % knob_every == 0:
                    load.change_knob(svc.http)
                s = svc.sample(phase)
                print(f"soak: t={s['t']:.0f}s {phase}: {dict(load.counts)}, {s['procs']}", flush=True)
            paused = time.monotonic()
            load.pause()
            drain_s[then] = svc.drain()
            svc.sample(then)
            if then == "baseline":
                load.go.set()
                t_load += time.monotonic() - paused      # the pause is no load time
        shutdown = svc.stop()
    finally:
        if load is not None:
            load.stop.set()
        svc.close()
    base, end = next(s for s in svc.samples if s["phase"] == "baseline"), svc.samples[-1]
    loaded = [s for s in svc.samples if s["phase"] == "load"]
    tasks: list[Any] = [s.get("tasks") for s in (base, end)]
    memory, idle, leaks = {}, {}, {"leader asyncio tasks": None if None in tasks else tasks[1] - tasks[0]}
    for name, before in base["procs"].items():
        rss = [s["procs"][name]["rss"] for s in loaded if s["procs"].get(name)]
        window = max(3, len(rss) // 10)                 # a wave's activations swing RSS by tens of MB
        memory[name] = growth(rss[:window], rss[-window:])
        after = end["procs"].get(name)
        idle[name] = growth([before["rss"]], [after["rss"]]) if before and after else None   # end vs baseline, drained
        leaks.update({f"{name} {k}": after[k] - before[k] if before and after else None for k in ("threads", "fds")})
    c, stage_end, sd = load.counts, end.get("stages") or [], shutdown
    leases, escrowed = ([s[k] for s in stage_end] if stage_end else None for k in ("leases", "escrowed"))
    bad_knobs = sum(k["status"] != 200 for k in load.knob_changes)
    targets = [*(target(f"service: {n} memory growth", g, "< 5%", g is not None and g < GROWTH_MAX)
                 for n, g in memory.items()),
               *(target(f"service: {n} leaked", v, "0", v is not None and v <= 0) for n, v in leaks.items()),
               target("service: leases at the end", leases, "0", leases is not None and not any(leases)),
               target("service: escrowed blocks at the end", escrowed, "0", escrowed is not None and not any(escrowed)),
               target("service: drained within 60 s (s)", drain_s.get("end"), "<= 60", None not in drain_s.values()),
               target("service: requests failed", c["failed"], "0", c["failed"] == 0),
               target("service: knob changes not answered 200", bad_knobs, f"0 of {len(load.knob_changes)}",
                      bad_knobs == 0 and bool(load.knob_changes)),
               target("service: exit code after SIGTERM", sd["exit_code"], "0 within 60 s", sd["exit_code"] == 0),
               target("service: last stderr line", sd["last_stderr_line"], "wavepp serve: stopped (...)",
                      sd["last_stderr_line"].startswith("wavepp serve: stopped (")),
               target("service: stage processes alive after exit", sd["stages_alive"], "0", sd["stages_alive"] == 0)]
    return {"counts": {k: c[k] for k in COUNTS}, "knob_changes": load.knob_changes, "failures": load.failures,
            "fds_added": {n: sorted((Counter(end["fd_names"][n]) - Counter(fds)).elements())
                          for n, fds in base["fd_names"].items()}, "redis_port": svc.port,
            "server_cancelled": (end.get("server") or {}).get("cancelled"), "knobs_before": knobs, "leaks": leaks,
            "memory_growth": memory, "idle_memory_growth": idle, "leases_end": leases, "escrowed_end": escrowed,
            "evictions": [s["evictions"] for s in stage_end], "drain_s": drain_s, "shutdown": shutdown,
            "targets": targets, "samples": svc.samples}


def run_sim(args: argparse.Namespace) -> dict[str, Any]:
    print(f"soak: sim, {args.sim_requests} requests", flush=True)
    with tempfile.TemporaryDirectory() as tmp, open(f"{tmp}/bench.log", "wb") as log:
        command = ["bench", *SIM_BENCH, "--requests", str(args.sim_requests), "--json", f"{tmp}/bench.json"]
        t0, rss = time.monotonic(), []
        proc = subprocess.Popen([sys.executable, "-m", "wavepp", *command], stdout=log, stderr=log, cwd=ROOT)
        while proc.poll() is None:
            if (figures := proc_figures(proc.pid)) and figures["rss"]:      # 0: exiting
                rss.append((round(time.monotonic() - t0, 2), figures["rss"]))
            time.sleep(SIM_SAMPLE_S)
        wall = time.monotonic() - t0
        run = json.loads(read(f"{tmp}/bench.json") or '{"runs": [{}]}')["runs"][0]
        tail = read(f"{tmp}/bench.log").splitlines()[-5:]
    k = len(values := [r for _, r in rss])           # evenly spaced: a share of the samples is one of the wall time
    g = growth(values[k // 10:max(k // 5, k // 10 + 1)], values[-max(1, k // 10):])
    f = {"command": ["wavepp", *command[:-2]], "exit_code": proc.returncode, "wall_s": round(wall, 1),
         "wall_ms_per_request": round(wall / args.sim_requests * 1e3, 3), "requests": args.sim_requests,
         **{k: run.get(k) for k in ("completed", "failed", "stalled", "evictions", "good_hit_rate", "spans")},
         "memory_growth": g, "peak_rss": max(values, default=0), "output_tail": tail, "rss_samples": rss}
    # Not a target: a bench keeps every span for its figures (~10 KB a request), so its memory grows with
    # the run by design; the bounded memory of a long run is the service's (phase A).
    f["memory_growth_note"] = "reported, not a target: wavepp bench keeps every span of its run"
    f["targets"] = [target("sim: requests completed", f["completed"], str(n := args.sim_requests), f["completed"] == n),
                    target("sim: requests failed", f["failed"], "0", f["failed"] == 0),
                    target("sim: exit code (invariants checked)", f["exit_code"], "0", f["exit_code"] == 0)]
    return f


def target(name: str, value: Any, goal: str, ok: bool) -> dict[str, Any]:
    return {"name": name, "value": value, "target": goal, "ok": bool(ok)}


def shown(value: Any, name: str) -> str:
    if isinstance(value, float):
        return f"{value:+.2%}" if "growth" in name else f"{value:g}"
    return "-" if value is None else str(value)


def markdown(report: dict[str, Any]) -> str:
    lines = [f"# Soak, {report['started']}", "", f"`{' '.join(report['command'])}`", "",
             "| figure | value | target | ok |", "|---|---|---|---|",
             *(f"| {t['name']} | {shown(t['value'], t['name'])} | {t['target']} | {'yes' if t['ok'] else '**no**'} |"
               for t in report["targets"])]
    if s := report.get("service"):
        lines += ["", "Service requests: " + ", ".join(f"{k} {v}" for k, v in s["counts"].items()) + f"; knob changes "
                  f"{len(s['knob_changes'])}; evictions per stage {s['evictions']}; fds added {s['fds_added']}."]
    if m := report.get("sim"):
        lines += ["", f"Sim: {m['wall_ms_per_request']} ms per request, `{' '.join(m['command'])}`"]
    return "\n".join([*lines, "", "Every target holds." if report["ok"] else "**Targets missed.**", ""])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--minutes", type=float, default=30.0, help="load on the service (default 30)")
    p.add_argument("--sim-requests", type=int, default=100_000, help="requests on the sim (default 100000)")
    p.add_argument("--report", type=Path, default=Path("out/soak.json"), help="JSON, a .md twin beside it")
    p.add_argument("--clients", type=int, default=8, help="closed-loop clients (default 8)")
    p.add_argument("--sample-s", type=float, default=10.0, help="seconds between samples (default 10)")
    skip = p.add_mutually_exclusive_group()
    skip.add_argument("--skip-service", action="store_true", help="no service phase (debugging)")
    skip.add_argument("--skip-sim", action="store_true", help="no sim phase (debugging)")
    args = p.parse_args(argv)
    if not (args.minutes > 0 and args.sample_s > 0 and args.sim_requests >= 1 and args.clients >= 1):
        p.error("--minutes and --sample-s must be > 0, --sim-requests and --clients at least 1")
    report: dict[str, Any] = {"command": [sys.argv[0], *(sys.argv[1:] if argv is None else argv)],
                              "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    targets: list[dict[str, Any]] = []
    try:
        for phase, run in (("service", run_service), ("sim", run_sim)):
            if not getattr(args, f"skip_{phase}"):
                report[phase] = run(args)
                targets += report[phase].pop("targets")
    except (RuntimeError, OSError, KeyError, ValueError, httpx.HTTPError) as exc:
        targets.append(target("soak ran to the end", f"{type(exc).__name__}: {exc}"[:2000], "no error", False))
    report["targets"], report["ok"] = targets, all(t["ok"] for t in targets)
    args.report.parent.mkdir(parents=True, exist_ok=True)
    args.report.write_text(json.dumps(report, indent=1) + "\n")
    args.report.with_suffix(".md").write_text(markdown(report))
    print(f"soak: wrote {args.report} and {args.report.with_suffix('.md')}", flush=True)
    for t in targets:
        if not t["ok"]:
            print(f"soak: missed: {t['name']} = {shown(t['value'], t['name'])} (target {t['target']})", file=sys.stderr)
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
