"""What a malformed request hears: one message saying what is wrong with it, in
the API's one error shape, whatever part of the request is at fault - the prompts, the body's
media type, or the HTTP framing itself."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest


@pytest.fixture(scope="module")
def server(server_class: Any) -> Iterator[Any]:
    server = server_class("--engine", "sim", "--pp", "2", "--kv-blocks", "400", "--time-scale", "0.01",
                          "--max-prompt-tokens", "512", "--tokenizer", "none")
    yield server
    assert server.stop() == 0, server.errors()


def refused(r: httpx.Response, status: int, param: str | None) -> str:
    assert r.status_code == status, r.text
    assert r.headers["content-type"] == "application/json"
    error = r.json()["error"]
    assert error["param"] == param and error["code"] == status and error["type"] == "invalid_request_error", error
    return str(error["message"])


def test_too_many_prompts_says_how_many_are_allowed(server: Any) -> None:
    r = server.client.post("/v1/completions", json={"prompt": [[1, 2, 3]] * 65, "max_tokens": 0})
    assert refused(r, 422, "prompt") == "prompt: at most 64 prompts in one request, got 65"


def test_one_bad_prompt_of_many_is_named(server: Any) -> None:
    r = server.client.post("/v1/completions", json={"prompt": [[1, 2], [3, 999999]], "max_tokens": 0})
    assert refused(r, 422, "prompt") == "prompt: prompt 1: token id 999999 is outside the vocabulary [0, 128256)"


@pytest.mark.parametrize(("path", "body"), [
    ("/v1/prefill", {"prompt": "hello world"}),
    ("/v1/completions", {"prompt": "hello world"}),
    ("/v1/completions", {"prompt": ["hello", "world"]}),
])
def test_a_text_prompt_without_a_tokenizer_says_so(server: Any, path: str, body: dict[str, Any]) -> None:
    message = refused(server.client.post(path, json=body), 422, "prompt")
    assert message.startswith("prompt: prompts as text need a tokenizer (start the server with --tokenizer)"), message
    assert "Input should be" not in message


@pytest.mark.parametrize(("path", "body"), [
    ("/v1/prefill", {"token_ids": [1, 2.5, 3]}),
    ("/v1/completions", {"prompt": [1, 2.5, 3]}),
])
def test_a_fraction_is_not_a_token_id(server: Any, path: str, body: dict[str, Any]) -> None:
    """2.0 is token 2 - JSON Schema's integer, which the served schema states and a client built on
    it may send (schemathesis does) - but 2.5 is no token."""
    message = refused(server.client.post(path, json=body), 422, "token_ids" if "token_ids" in body else "prompt")
    assert "must be a whole number" in message or "must be an integer, got 2.5" in message, message
    whole = {k: [1, 2.0, 3] for k in body}
    assert server.client.post(path, json={**whole, **({"max_tokens": 0} if "prompt" in body else {})}).status_code \
        == 200


def test_json_sent_as_text_is_told_the_media_type(server: Any) -> None:
    r = server.client.post("/v1/prefill", content=json.dumps({"token_ids": [1, 2]}),
                           headers={"content-type": "text/plain"})
    assert refused(r, 415, "body") == "body: send JSON with Content-Type: application/json (got 'text/plain')"


def test_a_malformed_content_length_is_answered_in_the_error_shape(server: Any) -> None:
    url = urlsplit(server.url)
    with socket.create_connection((url.hostname, url.port), timeout=10) as sock:
        sock.sendall(b"POST /v1/prefill HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Content-Length: 12abc\r\n\r\n{}")
        raw = b""
        while chunk := sock.recv(65536):
            raw += chunk
    head, _, body = raw.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 400") and b"content-type: application/json" in head.lower(), raw
    error = json.loads(body)["error"]
    assert error["code"] == 400 and error["message"].startswith("malformed HTTP request"), error
    assert server.client.get("/health").status_code == 200          # still serving


@pytest.mark.parametrize("headers", [{}, {"content-type": ""}, {"content-type": "; charset=utf-8"}],
                         ids=["none", "empty", "parameters-only"])
@pytest.mark.parametrize(("method", "path", "body"), [("POST", "/v1/prefill", {"token_ids": [1, 2]}),
                                                      ("PUT", "/v1/knobs", {"changes": {"ring": 2}})])
def test_json_without_a_media_type_is_told_the_media_type(server: Any, headers: dict[str, str], method: str,
                                                           path: str, body: dict[str, Any]) -> None:
    version = server.client.get("/v1/knobs").json()["version"]
    r = server.client.request(method, path, content=json.dumps(body).encode(), headers=headers)
    assert refused(r, 415, "body") == "body: send JSON with Content-Type: application/json (got none)"
    assert server.client.get("/v1/knobs").json()["version"] == version            # nothing written


def _raw_answer(server: Any, request: bytes) -> tuple[bytes, dict[str, Any]]:
    url = urlsplit(server.url)
    with socket.create_connection((url.hostname, url.port), timeout=10) as sock:
        sock.sendall(request)
        raw = b""
        while chunk := sock.recv(65536):
            raw += chunk
    head, _, body = raw.partition(b"\r\n\r\n")
    return head, json.loads(body)["error"]


@pytest.mark.parametrize("digits", [11, 20, 21, 40])
def test_a_content_length_of_any_length_past_the_limit_is_413(server: Any, digits: int) -> None:
    head, error = _raw_answer(server, b"POST /v1/prefill HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                                      b"Content-Length: " + b"9" * digits + b"\r\n\r\n{}")
    assert head.startswith(b"HTTP/1.1 413"), (head, error)
    assert error["param"] == "body" and "larger than the limit" in error["message"], error
    assert server.client.get("/health").status_code == 200


def test_a_connection_stays_open_longer_than_the_longest_retry_after(server: Any) -> None:
    """A client told to retry after N seconds (at most RETRY_AFTER_MAX_S) comes back on the same
    kept-alive connection: the server must not close it first. Closing idle connections at 5 s -
    uvicorn's default, and httpx's own keep-alive expiry - made a client that came back after a
    5 s Retry-After race the server's close (a ReadError)."""
    from wavepp.runtime.serve.main import KEEP_ALIVE_S
    from wavepp.runtime.serve.runtime import RETRY_AFTER_MAX_S
    assert KEEP_ALIVE_S >= RETRY_AFTER_MAX_S + 10
    url = urlsplit(server.url)
    request = b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n"

    def answer(sock: socket.socket) -> bytes:
        """One response: its head and its Content-Length of body (b"" when the server closed)."""
        raw = b""
        while b"\r\n\r\n" not in raw:
            chunk = sock.recv(65536)
            if not chunk:
                return raw
            raw += chunk
        head, _, body = raw.partition(b"\r\n\r\n")
        length = int(next(line.split(b":")[1] for line in head.lower().split(b"\r\n")
                          if line.startswith(b"content-length")))
        while len(body) < length:
            body += sock.recv(65536)
        return head

    with socket.create_connection((url.hostname, url.port), timeout=10) as sock:
        sock.sendall(request)
        assert answer(sock).startswith(b"HTTP/1.1 200")
        time.sleep(6.0)                                 # idle past the 5 s a client might also keep it
        sock.sendall(request)
        assert answer(sock).startswith(b"HTTP/1.1 200")
