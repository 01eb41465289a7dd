"""With ``WAVEPP_ADMIN_TOKEN`` set, a knob write over HTTP needs ``Authorization: Bearer <token>``:
without it or with a wrong one it is 401 in our error shape with ``WWW-Authenticate``, and nothing is
written; reads stay open. The stack hands the token to the server and the dashboard in their
environment, never on a command line."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from wavepp.runtime.serve.config import resolve
from wavepp.runtime.serve.stack import Stack, serve_flags

TOKEN = "s3cret-admin-token"


@pytest.fixture(scope="module")
def server(server_class: Any) -> Iterator[Any]:
    srv = server_class("--engine", "sim", "--pp", "2", "--kv-blocks", "400", env={"WAVEPP_ADMIN_TOKEN": TOKEN})
    yield srv
    assert srv.stop() == 0, srv.errors()


def put(server: Any, changes: dict[str, Any], authorization: str | None = None) -> Any:
    headers = {"Authorization": authorization} if authorization is not None else {}
    return server.client.put("/v1/knobs", json={"changes": changes}, headers=headers)


@pytest.mark.parametrize(("authorization", "message", "challenge"), [
    (None, "needs the admin token", 'Bearer realm="wavepp"'),
    ("Bearer", "needs the admin token", 'Bearer realm="wavepp"'),
    (f"Basic {TOKEN}", "needs the admin token", 'Bearer realm="wavepp"'),
    ("Bearer s3cret-admin-tokeN", "the admin token is wrong", 'Bearer realm="wavepp", error="invalid_token"'),
    (f"Bearer {TOKEN}x", "the admin token is wrong", 'Bearer realm="wavepp", error="invalid_token"'),
])
def test_a_knob_write_without_the_token_is_401_and_writes_nothing(server: Any, authorization: str | None,
                                                                   message: str, challenge: str) -> None:
    before = server.client.get("/v1/knobs")
    assert before.status_code == 200                          # reading stays open
    for changes in ({"ring": 3}, {"ring": "not a number"}):  # refused before the body is even validated
        r = put(server, changes, authorization)
        assert r.status_code == 401, r.text
        error = r.json()["error"]
        assert set(r.json()) == {"error"} and set(error) == {"message", "type", "param", "code"}
        assert (error["type"], error["param"], error["code"]) == ("authentication_error", None, 401)
        assert message in error["message"] and TOKEN not in r.text
        assert r.headers["WWW-Authenticate"] == challenge
    assert server.client.get("/v1/knobs").json()["version"] == before.json()["version"]


@pytest.mark.parametrize("body", [b"{not json", b"", b"[1, 2]", b'{"changes": {"ring": null}}', b"\xff\xfe"])
def test_the_token_is_checked_before_the_body_is_read(server: Any, body: bytes) -> None:
    """A malformed body without the token is 401 (the token first), never the body's 422."""
    r = server.client.put("/v1/knobs", content=body, headers={"content-type": "application/json"})
    assert r.status_code == 401, r.text
    assert r.json()["error"]["type"] == "authentication_error"


def test_the_right_token_writes(server: Any) -> None:
    before = server.client.get("/v1/knobs").json()["version"]
    r = put(server, {"ring": 4}, f"Bearer {TOKEN}")
    assert r.status_code == 200, r.text
    assert r.json()["version"] == before + 1 and r.json()["knobs"]["ring"] == 4
    bad = put(server, {"ring": -1}, f"bearer {TOKEN}")       # the scheme is case-insensitive; then validated
    assert bad.status_code == 422 and bad.json()["error"]["param"] == "ring"
    for path in ("/v1/state", "/v1/spans", "/metrics", "/health", "/ready", "/v1/models"):
        assert server.client.get(path).status_code == 200, path
    responses = server.client.get("/openapi.json").json()["paths"]["/v1/knobs"]["put"]["responses"]
    assert "401" in responses


def test_a_bad_token_setting_is_refused_without_showing_it() -> None:
    with pytest.raises(ValueError) as info:
        resolve({}, {"WAVEPP_ADMIN_TOKEN": "two words"})
    assert str(info.value).startswith("WAVEPP_ADMIN_TOKEN: ") and "two" not in str(info.value)
    assert resolve({}, {"WAVEPP_ADMIN_TOKEN": TOKEN})["admin_token"] == TOKEN
    assert resolve({}, {})["admin_token"] is None


def test_the_stack_hands_the_token_over_in_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    given = {"admin_token": TOKEN, "pp": 3, "host": "0.0.0.0"}
    assert serve_flags(given) == ["--pp", "3"]
    monkeypatch.delenv("WAVEPP_ADMIN_TOKEN", raising=False)
    assert Stack(given, 0, 0, "c").env()["WAVEPP_ADMIN_TOKEN"] == TOKEN
    assert "WAVEPP_ADMIN_TOKEN" not in Stack({}, 0, 0, "c").env()
