"""A store password never shows: not in what a command prints or logs, the files it writes, the
records it leaves in the store, nor on a dashboard page. Every command runs against a real Redis
started with ``--requirepass``; a store URL is shown as ``redis://:***@host…``."""

from __future__ import annotations

import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis

from wavepp.store.urls import parse_store_url, redact

StartRedis = Callable[..., tuple[subprocess.Popen[bytes], int]]
APP = str(Path(__file__).resolve().parents[2] / "dashboard" / "app.py")
WAVEPP = [sys.executable, "-m", "wavepp"]


@pytest.mark.parametrize(("text", "shown"), [
    ("redis://:hunter2@h:1/0", "redis://:***@h:1/0"),
    ("redis://alice:hunter2@h/0?cluster=x", "redis://alice:***@h/0?cluster=x"),
    ("rediss://alice:hunter2@h", "rediss://alice:***@h"),
    ("redis://:hun@ter2@h/0", "redis://:***@h/0"),               # an unescaped "@": hidden whole
    ("redis://:hun/ter2@h/0", "redis://:***@h/0"),               # an unescaped "/" (urlsplit cannot read it)
    ("store:redis://:hunter2@h/0 and rediss://:hunter3@g", "store:redis://:***@h/0 and rediss://:***@g"),
    ("redis://h:6379/0?cluster=x", "redis://h:6379/0?cluster=x"),   # no password: unchanged
    ("redis://alice@h/0", "redis://alice@h/0"),
])
def test_redact_hides_the_password_of_every_url(text: str, shown: str) -> None:
    assert redact(text) == shown


def test_a_store_url_shows_without_its_password() -> None:
    url = parse_store_url("rediss://alice:hunter2@h:7/3?cluster=c")
    assert url.shown == "rediss://alice:***@h:7/3?cluster=c"
    assert "hunter2" not in repr(url) and "hunter2" in url.url      # redis-py still gets it
    assert parse_store_url("memory").shown == "memory"


class Secret:
    """A private Redis that wants a password, and URLs (both forms) naming it."""

    def __init__(self, start_private_redis: StartRedis) -> None:
        self.password = f"pw-{secrets.token_hex(8)}"
        _, self.port = start_private_redis("--requirepass", self.password)
        self.cluster = "secret"

    def url(self, user: str = "") -> str:
        return f"redis://{user}:{self.password}@127.0.0.1:{self.port}/0?cluster={self.cluster}"

    def records(self) -> str:
        """Everything the store holds (every key of every type), as one text to search."""
        client = redis.Redis(port=self.port, password=self.password, socket_timeout=5)
        parts: list[Any] = []
        try:
            for key in client.scan_iter(count=1000):
                kind = client.type(key).decode()
                read = {"string": client.get, "hash": client.hgetall, "list": lambda k: client.lrange(k, 0, -1),
                        "set": client.smembers, "zset": lambda k: client.zrange(k, 0, -1, withscores=True),
                        "stream": client.xrange}[kind]
                parts.append((key, read(key)))
        finally:
            client.close()
        assert parts, "the commands left nothing in the store: the check would be empty"
        return repr(parts)

    def assert_absent(self, *texts: str) -> None:
        for text in texts:
            assert self.password not in text, text[text.find(self.password) - 200:][:400]


@pytest.fixture
def secret(start_private_redis: StartRedis) -> Secret:
    return Secret(start_private_redis)


def test_bench_prints_writes_and_stores_no_password(secret: Secret, tmp_path: Path) -> None:
    outputs = [tmp_path / "bench.json", tmp_path / "run.json.gz", tmp_path / "trace.json"]
    done = subprocess.run([*WAVEPP, "bench", "--engine", "sim", "--store", secret.url("default"), "--workload",
                           "reuse90", "--concurrency", "4", "--requests", "12", "--policy", "wavepp", "--quiet",
                           "--json", str(outputs[0]), "--save-run", str(outputs[1]), "--trace", str(outputs[2])],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    from wavepp.runtime.runs.runfile import load_runs
    saved = load_runs(outputs[1])
    assert f"default:***@127.0.0.1:{secret.port}/0" in saved[0].label      # the run says where it ran
    secret.assert_absent(done.stdout, done.stderr, *(p.read_text() for p in outputs[::2]),
                         json.dumps([r.as_dict() for r in saved]), secret.records())


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_serve_announces_logs_and_answers_no_password(secret: Secret) -> None:
    stderr = tempfile.TemporaryFile()
    proc = subprocess.Popen([*WAVEPP, "serve", "--engine", "sim", "--port", "0", "--pp", "2"],
                            stdout=subprocess.PIPE, stderr=stderr, text=True,
                            env={**os.environ, "WAVEPP_STORE": secret.url()})
    answers = []
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line, "wavepp serve did not start"
        info = json.loads(line)
        assert info["store"] == f"redis://:***@127.0.0.1:{secret.port}/0?cluster=secret"
        with httpx.Client(base_url=info["listening"], timeout=60) as client:
            deadline = time.monotonic() + 90
            while client.get("/ready").status_code != 200:
                assert time.monotonic() < deadline and proc.poll() is None, "wavepp serve is not ready"
                time.sleep(0.05)
            assert client.post("/v1/prefill", json={"token_ids": list(range(1, 200))}).status_code == 200
            answers = [client.get(path).text for path in ("/v1/state", "/v1/knobs", "/v1/spans", "/metrics",
                                                          "/ready", "/openapi.json")]
        proc.send_signal(signal.SIGTERM)
        rest = proc.stdout.read()
        assert proc.wait(60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    stderr.seek(0)
    secret.assert_absent(line, rest, stderr.read().decode(errors="replace"), *answers, secret.records())


def test_dashboard_prints_no_password(secret: Secret) -> None:
    """It printed ``WavePP dashboard (store:redis://:PASSWORD@…)``."""
    proc = subprocess.Popen([*WAVEPP, "dashboard", "--store", secret.url(), "--port", str(_free_port())],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=30)
    assert line.startswith(f"WavePP dashboard (store:redis://:***@127.0.0.1:{secret.port}/0"), line + err
    secret.assert_absent(line, err)


def _element_texts(node: Any) -> Iterator[str]:
    """Every element of an AppTest page as protobuf text (values, labels, options, captions)."""
    proto = getattr(node, "proto", None)
    if proto is not None:
        yield str(proto)
    for child in getattr(node, "children", {}).values():
        yield from _element_texts(child)


def test_dashboard_pages_show_no_password(secret: Secret, monkeypatch: pytest.MonkeyPatch) -> None:
    """The sidebar caption said ``source: store:redis://:PASSWORD@…``; run labels name the store too."""
    from streamlit.testing.v1 import AppTest

    from wavepp.runtime.bench.runs import BenchConfig, run_one
    from wavepp.runtime.engines.config import SimConfig
    from wavepp.runtime.engines.sim.engine import SimEngine
    from wavepp.runtime.sources.workloads import parse_workload
    engine = SimEngine(SimConfig("llama-3-8b", "h200", 2, kv_blocks=[2000], store_url=secret.url()))
    run_one(engine, BenchConfig(parse_workload("reuse90"), [4], ["wavepp"], 8, prompt_tokens=2048), "wavepp", 4)
    monkeypatch.setenv("WAVEPP_DASHBOARD", f"store:{secret.url()}")
    at = AppTest.from_file(APP, default_timeout=60)
    texts = []
    for page in ("Pipeline", "Knobs"):
        at.session_state["page"] = page
        at.run()
        assert not at.exception, [e.value for e in at.exception]
        texts += list(_element_texts(at._tree))
    captions = [c.value for c in at.sidebar.caption]
    assert f"source: store:redis://:***@127.0.0.1:{secret.port}/0?cluster=secret" in captions, captions
    assert any(f"redis://:***@127.0.0.1:{secret.port}/0" in c for c in captions if c.startswith("run: ")), captions
    secret.assert_absent(*texts)
