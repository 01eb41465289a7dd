"""The HTTP bad-input corpus (``tests/data/bad_inputs/http_cases.json``) against a live server: each
request gets the answer the corpus states - the status, and for a refusal the one error shape with
the field at fault named - in order, on one server, which stays healthy and answers no 5xx."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

CORPUS = json.loads((Path(__file__).parents[1] / "data" / "bad_inputs" / "http_cases.json").read_text())["cases"]


@pytest.fixture(scope="module")
def server(server_class: Any) -> Iterator[Any]:
    server = server_class("--engine", "sim", "--pp", "2", "--kv-blocks", "400", "--time-scale", "0.01",
                          "--max-prompt-tokens", "512", "--tokenizer", "none")
    yield server
    assert server.client.get("/health").status_code == 200
    assert server.stop() == 0, server.errors()


def send(server: Any, case: dict[str, Any]) -> Any:
    if "raw" in case:
        raw = case["raw"].encode("latin-1" if case.get("raw_latin1") else "utf-8")
        return server.client.request(case["method"], case["path"], content=raw,
                                     headers={"content-type": case["content_type"]})
    if "body" in case:
        return server.client.request(case["method"], case["path"], content=json.dumps(case["body"]).encode(),
                                     headers={"content-type": "application/json"})
    return server.client.request(case["method"], case["path"])


def test_the_corpus_is_large_and_every_case_says_what_it_expects() -> None:
    cli = json.loads((Path(__file__).parents[1] / "data" / "bad_inputs" / "cases.json").read_text())["cases"]
    assert len(CORPUS) + len(cli) >= 200         # a corpus of at least 200 cases, kept as data
    for case in CORPUS:
        assert case["status"] != 200 or case.get("why"), case["case"]
        assert case["status"] == 200 or case.get("says"), case["case"]


@pytest.mark.parametrize("case", CORPUS, ids=[c["case"] for c in CORPUS])
def test_each_bad_request_gets_its_answer(server: Any, case: dict[str, Any]) -> None:
    r = send(server, case)
    assert r.status_code == case["status"], (r.status_code, r.text[:300])
    if r.status_code == 200:
        return
    if r.status_code in (404, 405) and "param" not in case:
        assert case["says"] in r.text
        return
    assert r.headers["content-type"] == "application/json"
    error = r.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["code"] == r.status_code
    assert error["param"] == case["param"], error
    assert case["says"] in error["message"], error
    assert len(error["message"]) < 1200                     # bounded, whatever the client sent
