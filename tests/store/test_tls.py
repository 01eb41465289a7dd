"""The store over TLS, end to end: a private ``redis-server`` that listens on a TLS port only
(``--port 0 --tls-port …``, a certificate signed by a CA made for the test, ``--requirepass``), and
``wavepp bench`` run against it through ``rediss://:password@…?ssl_ca_certs=CA``. Its records reach
that server; a plain-text client, a client that does not trust the CA, and a wrong or missing
password are each refused with one line (exit 2) - and no line, file or record shows the password."""

from __future__ import annotations

import asyncio
import json
import secrets
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from redis import exceptions as rex
from redis.backoff import NoBackoff
from redis.retry import Retry

from wavepp.store.base import StoreError
from wavepp.store.redis_store import RedisStore
from wavepp.store.urls import parse_store_url

from .conftest import pings, start_redis_on_a_free_port, stop_server  # type: ignore[import-not-found]

WAVEPP = [sys.executable, "-m", "wavepp"]
HOST = "127.0.0.1"
START_TIMEOUT_S = 10.0
BENCH = ["bench", "--engine", "sim", "--workload", "reuse90", "--concurrency", "4", "--requests", "12",
         "--policy", "wavepp", "--quiet"]


def _openssl(*args: str, cwd: Path) -> None:
    binary = shutil.which("openssl")
    if binary is None:
        pytest.fail("openssl is not on PATH: the TLS test makes its certificates with it", pytrace=False)
    done = subprocess.run([binary, *args], cwd=cwd, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


def make_certificates(folder: Path) -> dict[str, Path]:
    """A self-signed CA and a server certificate it signed, valid for 127.0.0.1 and localhost."""
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.crt",
             "-days", "2", "-subj", "/CN=wavepp test CA", cwd=folder)
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server.key", "-out", "server.csr",
             "-subj", "/CN=127.0.0.1", cwd=folder)
    (folder / "san.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    _openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
             "-out", "server.crt", "-days", "2", "-extfile", "san.ext", cwd=folder)
    return {"ca": folder / "ca.crt", "cert": folder / "server.crt", "key": folder / "server.key"}


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


class TlsRedis:
    """A private redis-server on a TLS port only, wanting a password."""

    def __init__(self, folder: Path) -> None:
        self.files = make_certificates(folder)
        self.ca = str(self.files["ca"])
        self.password = f"pw-{secrets.token_hex(8)}"
        self.proc, self.port = self._start()

    def _start(self) -> tuple[subprocess.Popen[bytes], int]:
        return start_redis_on_a_free_port(
            lambda port: ["--port", "0", "--tls-port", str(port), "--bind", HOST,
                          "--tls-cert-file", str(self.files["cert"]), "--tls-key-file", str(self.files["key"]),
                          "--tls-ca-cert-file", self.ca, "--tls-auth-clients", "no", "--requirepass", self.password],
            self._answers, "redis-server with TLS (built without TLS?)")

    def _answers(self, port: int) -> bool:
        return pings(redis.Redis(host=HOST, port=port, password=self.password, ssl=True, ssl_ca_certs=self.ca,
                                 socket_timeout=0.5, socket_connect_timeout=0.5, retry=Retry(NoBackoff(), 0)))

    def url(self, cluster: str, password: str | None = None, scheme: str = "rediss", ca: bool = True) -> str:
        secret = self.password if password is None else password
        auth = f":{secret}@" if secret else ""
        query = f"cluster={cluster}" + (f"&ssl_ca_certs={self.ca}" if ca and scheme == "rediss" else "")
        return f"{scheme}://{auth}{HOST}:{self.port}/0?{query}"

    def client(self) -> redis.Redis:
        """A redis-py client of our own (not the store's), over TLS with the right password."""
        return redis.Redis(host=HOST, port=self.port, password=self.password, ssl=True, ssl_ca_certs=self.ca,
                           socket_timeout=5)

    def records(self, cluster: str) -> dict[str, Any]:
        """Every key of one deployment and what it holds, as the server has it."""
        read = {"string": "get", "hash": "hgetall", "set": "smembers", "stream": "xrange",
                "zset": "zrange"}
        client = self.client()
        try:
            out: dict[str, Any] = {}
            for key in client.scan_iter(match=f"wavepp:{{{cluster}}}:*", count=1000):
                kind = client.type(key).decode()
                args = (0, -1) if kind == "zset" else ()
                out[key.decode().removeprefix(f"wavepp:{{{cluster}}}:")] = getattr(client, read[kind])(key, *args)
            return out
        finally:
            client.close()


@pytest.fixture(scope="module")
def tls_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsRedis]:
    server = TlsRedis(tmp_path_factory.mktemp("tls"))
    try:
        yield server
    finally:
        stop_server(server.proc)


def _wavepp(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*WAVEPP, *args], capture_output=True, text=True, timeout=300)


def test_bench_runs_over_tls_and_its_records_reach_the_server(tls_redis: TlsRedis, tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    done = _wavepp(*BENCH, "--store", tls_redis.url("tls-bench"), "--json", str(out))
    assert done.returncode == 0, done.stderr
    run = json.loads(out.read_text())["runs"][0]
    assert run["completed"] == 12 and run["failed"] == 0
    shown = f"rediss://:***@{HOST}:{tls_redis.port}/0?cluster=tls-bench"
    assert shown in done.stdout, done.stdout                     # it says where it ran, password hidden

    records = tls_redis.records("tls-bench")
    assert {"hint:stages", "plans", "knobs", "deployment", "status", "runs", "runs:meta", "spans"} <= set(records)
    status = json.loads(records["status"])
    run_ids = [k.decode() for k in records["runs:meta"]]
    assert run_ids == [status["run"]] and status["state"] == "finished" and status["finished"] == 12
    assert shown in records["runs"][status["run"].encode()].decode()        # the run's label names the store
    # Every span the run counted went through the span exporter's own (synchronous) TLS client.
    assert len(records["spans"]) == run["spans"] > 0
    everything = done.stdout + done.stderr + out.read_text() + repr(records)
    assert tls_redis.password not in everything


def test_the_store_url_hands_the_ca_to_every_client(tls_redis: TlsRedis) -> None:
    """The store (asyncio) and a synchronous client built from the same ``StoreUrl.url`` (what the span
    exporter and the dashboard's readers do) both trust the CA the URL names."""
    url = parse_store_url(tls_redis.url("tls-clients"))
    assert url.tls and f"ssl_ca_certs={tls_redis.ca}".replace("/", "%2F") in url.url

    async def body() -> int:
        store = await RedisStore.connect(url)
        try:
            await store.hint_update(0, [11, 12, 13], [])
            return await store.hint_count(0)
        finally:
            await store.clear_all()
            await store.close()
    assert asyncio.run(body()) == 3
    client = redis.Redis.from_url(url.url, socket_timeout=5)
    try:
        assert client.ping()
    finally:
        client.close()


def _refused(*store_args: str) -> str:
    """Run a bench against ``--store``; it must exit 2 with exactly one line on stderr, which is returned."""
    done = _wavepp(*BENCH, "--store", *store_args)
    assert done.returncode == 2, (done.returncode, done.stdout, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("wavepp: error: "), done.stderr
    assert "Traceback" not in done.stdout
    return lines[0]


def test_a_plain_text_client_is_refused(tls_redis: TlsRedis) -> None:
    line = _refused(tls_redis.url("tls-plain", scheme="redis"))
    assert f"cannot reach redis at {HOST}:{tls_redis.port}/0" in line and "use rediss://" in line, line
    assert tls_redis.password not in line
    plain = redis.Redis(host=HOST, port=tls_redis.port, password=tls_redis.password, socket_timeout=2,
                        retry=Retry(NoBackoff(), 0))
    try:
        with pytest.raises(rex.ConnectionError):             # the server speaks TLS only: no plain-text PING
            plain.ping()
    finally:
        plain.close()
    assert tls_redis.records("tls-plain") == {}


def test_a_client_that_does_not_trust_the_ca_is_refused(tls_redis: TlsRedis) -> None:
    line = _refused(tls_redis.url("tls-untrusted", ca=False))
    assert "CERTIFICATE_VERIFY_FAILED" in line and "ssl_ca_certs=PATH" in line, line
    assert tls_redis.password not in line and tls_redis.records("tls-untrusted") == {}


@pytest.mark.parametrize("password", ["wrong-password", ""])
def test_a_wrong_or_missing_password_is_refused(tls_redis: TlsRedis, password: str) -> None:
    line = _refused(tls_redis.url("tls-auth", password=password))
    assert line == f"wavepp: error: redis at {HOST}:{tls_redis.port}/0: authentication failed (wrong user or password)"
    assert tls_redis.records("tls-auth") == {}


@pytest.mark.parametrize(("query", "problem"), [
    ("ssl_cert_reqs=maybe", "ssl_cert_reqs must be one of required, optional, none"),
    ("ssl_ca_certs=/nonexistent/ca.crt", "ssl_ca_certs: no file '/nonexistent/ca.crt'"),
])
def test_bad_tls_parameters_are_refused_in_one_line(query: str, problem: str) -> None:
    with pytest.raises(StoreError) as info:
        parse_store_url(f"rediss://:hunter2@h:1/0?cluster=x&{query}")
    assert str(info.value) == f"malformed store URL 'rediss://:***@h:1/0?cluster=x&{query}': {problem}"


def test_tls_parameters_need_rediss() -> None:
    with pytest.raises(StoreError, match="ssl_cert_reqs needs rediss://"):
        parse_store_url("redis://h:1/0?ssl_cert_reqs=none")


def test_tls_parameters_go_to_redis_py_and_not_on_screen() -> None:
    url = parse_store_url("rediss://:hunter2@h:7/3?cluster=c&ssl_cert_reqs=none")
    assert url.url == "rediss://:hunter2@h:7/3?ssl_cert_reqs=none"
    assert url.shown == "rediss://:***@h:7/3?cluster=c"
