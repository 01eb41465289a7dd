"""`wavepp serve` on the torch engine (tiny-llama, PP2) over real HTTP: prefill, reuse, the KV handle,
limits and errors, knobs, and the OpenAI-compatible completions driven by the official client."""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
import torch

BLOCK = 16


@pytest.fixture(scope="module")
def server(server_class: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    # Module scope: one torch server for the file (start-up imports torch and builds the stages).
    tok = make_tokenizer(tmp_path_factory.mktemp("tok"))
    srv = server_class("--engine", "torch", "--model", "tiny-llama", "--pp", "2", "--block-size", str(BLOCK),
                 "--kv-blocks", "512", "--max-prompt-tokens", "2048", "--max-body-bytes", "200000",
                 "--tokenizer", str(tok), "--served-model-name", "wavepp-tiny")
    srv.tokenizer_file = tok / "tokenizer.json"
    yield srv
    code = srv.stop()
    assert code == 0, srv.errors()
    assert "every accepted request was answered" in srv.errors()


def make_tokenizer(folder: Path) -> Path:
    """A real Hugging Face fast tokenizer (word level, trained here: nothing is downloaded)."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    tok = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    words = [f"w{i}" for i in range(500)]
    tok.train_from_iterator([" ".join(words)] * 3, trainers.WordLevelTrainer(special_tokens=["[UNK]"]))
    tok.save(str(folder / "tokenizer.json"))
    return folder


def reference_first_token(ids: list[int]) -> int:
    """The same seeded tiny-llama as one stage (no pipeline, no cache reuse): argmax of the last position."""
    from wavepp.runtime.engines.torch.config import load_config
    from wavepp.runtime.engines.torch.model import ChunkSpec, build_stages
    from wavepp.runtime.engines.torch.weights import random_weights
    cfg = load_config("tiny-llama")
    blocks = -(-len(ids) // BLOCK)
    [stage] = build_stages(cfg, 1, [blocks], BLOCK, random_weights(cfg, 0), device=torch.device("cpu"),
                           dtype=torch.float32)
    with torch.inference_mode():
        out = stage.forward_wave(torch.tensor(ids), [ChunkSpec(0, len(ids), tuple(range(blocks)))])
    return int(out.argmax(dim=-1)[-1])


def prompt(seed: int, n: int, prefix: list[int] | None = None) -> list[int]:
    rng = random.Random(seed)
    head = list(prefix or [])
    return head + [rng.randrange(32000) for _ in range(n - len(head))]


def test_prefill_answers_the_models_first_token_and_reuses_a_shared_prefix(server: Any) -> None:
    shared = prompt(1, 8 * BLOCK)
    a, b = prompt(2, 200, shared), prompt(3, 190, shared)
    first = server.client.post("/v1/prefill", json={"token_ids": a})
    assert first.status_code == 200, first.text
    body = first.json()
    assert body["first_token"] == reference_first_token(a)
    assert body["prompt_tokens"] == 200 and body["reused_tokens"] + body["computed_tokens"] == 200
    tables = body["kv"]["block_tables"]
    assert len(tables) == 2 and all(len(t) == -(-200 // BLOCK) for t in tables)     # PP2: one table per stage
    assert body["kv"]["request_id"] == body["id"] and body["kv"]["block_size"] == BLOCK
    assert body["timings"]["prefill_s"] > 0 and body["timings"]["server_s"] >= body["timings"]["prefill_s"] * 0.5

    second = server.client.post("/v1/prefill", json={"token_ids": b}).json()
    assert second["reused_tokens"] == 8 * BLOCK          # the shared prefix, whole blocks, from the cache
    assert second["first_token"] == reference_first_token(b)
    assert second["kv"]["block_tables"][0][:8] == tables[0][:8]     # the same cached blocks on stage 0
    assert server.wait_for(server.clean)["server"]["outstanding"] == 0


@pytest.mark.parametrize(("body", "param", "fragment"), [
    ({"token_ids": [1, 32000]}, "token_ids", "less than 32000"),
    ({"token_ids": [1, -1]}, "token_ids", "greater than or equal to 0"),
    ({"token_ids": []}, "token_ids", "at least 1"),
    ({"token_ids": list(range(2049))}, "token_ids", "at most 2048"),
    ({"token_ids": [1, 2], "prompt": "w1"}, "token_ids", "exactly one"),
    ({}, "token_ids", "exactly one"),
    ({"token_ids": "12"}, "token_ids", "valid list"),
    ({"token_ids": [1], "extra": 1}, "extra", "not permitted"),
    ({"prompt": " ".join(["w7"] * 2049)}, "prompt", "longer than the limit (2048)"),
])
def test_bad_requests_are_422_naming_the_field(server: Any, body: dict[str, Any], param: str, fragment: str) -> None:
    r = server.client.post("/v1/prefill", json=body)
    assert r.status_code == 422, r.text
    error = r.json()["error"]
    assert error["param"] == param and fragment in error["message"], error


def test_a_body_past_the_limit_is_413_and_not_json_is_422(server: Any) -> None:
    big = server.client.post("/v1/prefill", json={"token_ids": [1] * 120000})      # about 240 kB
    assert big.status_code == 413 and big.json()["error"]["param"] == "body"

    def chunks() -> Iterator[bytes]:        # no content-length: counted as it streams
        yield b'{"token_ids": ['
        for _ in range(100):
            yield b"1," * 1000
        yield b"1]}"
    streamed = server.client.post("/v1/prefill", content=chunks(), headers={"content-type": "application/json"})
    assert streamed.status_code == 413 and streamed.json()["error"]["param"] == "body"
    broken = server.client.post("/v1/prefill", content=b"{not json", headers={"content-type": "application/json"})
    assert broken.status_code == 422 and broken.json()["error"]["param"] == "body"
    assert server.client.get("/health").status_code == 200          # still serving


def test_text_prompts_go_through_the_configured_tokenizer(server: Any) -> None:
    r = server.client.post("/v1/prefill", json={"prompt": "w1 w2 w3 w4 nonsense"})
    assert r.status_code == 200, r.text
    assert r.json()["prompt_tokens"] == 5           # four words and one unknown


def test_openai_client_drives_completions_with_cached_tokens_in_usage(server: Any) -> None:
    client = openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0)
    shared = prompt(10, 6 * BLOCK)
    ids = prompt(11, 150, shared)
    first = client.completions.create(model="wavepp-tiny", prompt=ids, max_tokens=1)
    assert first.usage is not None and first.usage.prompt_tokens == 150 and first.usage.completion_tokens == 1
    assert first.choices[0].finish_reason == "length"
    again = client.completions.create(model="wavepp-tiny", prompt=prompt(12, 140, shared), max_tokens=0)
    assert again.usage is not None and again.usage.completion_tokens == 0
    assert again.usage.prompt_tokens_details is not None
    assert again.usage.prompt_tokens_details.cached_tokens == 6 * BLOCK

    text = client.completions.create(model="wavepp-tiny", prompt=["w5 w6 w7", "w8 w9"], max_tokens=1)
    assert [c.index for c in text.choices] == [0, 1] and text.usage is not None and text.usage.prompt_tokens == 5
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(str(server.tokenizer_file))
    for c in text.choices:                  # the first token, decoded by the server's tokenizer
        [token] = c.model_extra["token_ids"]
        assert 0 <= token < 32000 and c.text == tok.decode([token])

    stream = client.completions.create(model="wavepp-tiny", prompt=ids, max_tokens=1, stream=True,
                                       stream_options={"include_usage": True})
    events = list(stream)
    assert events[-1].usage is not None and events[-1].usage.prompt_tokens_details is not None
    assert events[-1].usage.prompt_tokens_details.cached_tokens >= 128      # the whole prompt was seen
    assert [c.index for e in events for c in e.choices] == [0]

    more = client.completions.create(model="wavepp-tiny", prompt=ids, max_tokens=5)   # prefill: one token
    assert more.choices[0].finish_reason == "length" and more.usage is not None and more.usage.completion_tokens == 1
    assert more.choices[0].model_extra["token_ids"] == [reference_first_token(ids)]
    with pytest.raises(openai.NotFoundError, match="does not exist"):
        client.completions.create(model="gpt-4", prompt=ids, max_tokens=1)
    assert [m.id for m in client.models.list()] == ["wavepp-tiny"]


def test_knobs_are_validated_versioned_and_applied_at_the_next_wave(server: Any) -> None:
    before = server.client.get("/v1/knobs").json()
    assert before["deployment"] == {"block_size": BLOCK, "num_stages": 2}
    bad = server.client.put("/v1/knobs", json={"changes": {"max_wave_tokens": 1000, "ring": -1}})
    assert bad.status_code == 422 and "max_wave_tokens" in bad.json()["error"]["message"]
    assert "ring" in bad.json()["error"]["message"]
    assert server.client.get("/v1/knobs").json()["version"] == before["version"]      # nothing written
    stale = server.client.put("/v1/knobs", json={"changes": {"ring": 3}, "expected_version": before["version"] - 1})
    assert stale.status_code == 409 and stale.json()["error"]["param"] == "expected_version"

    put = server.client.put("/v1/knobs", json={"changes": {"ring": 3, "max_wave_tokens": 512},
                                               "expected_version": before["version"]})
    assert put.status_code == 200 and put.json()["version"] == before["version"] + 1
    server.client.post("/v1/prefill", json={"token_ids": prompt(20, 300)})     # a wave boundary
    state = server.wait_for(lambda s: s["knobs_version"] == before["version"] + 1)
    assert state["ring"] == 3 and state["budget"]["max_wave_tokens"] == 512
    assert server.client.get("/v1/knobs").json()["running_version"] == before["version"] + 1


def test_openapi_schema_is_published_with_every_endpoint(server: Any) -> None:
    schema = httpx.get(f"{server.url}/openapi.json").json()
    assert {"/v1/prefill", "/v1/completions", "/v1/knobs", "/v1/state", "/health", "/ready",
            "/v1/models"} <= set(schema["paths"])
    assert "429" in schema["paths"]["/v1/prefill"]["post"]["responses"]


def test_metrics_are_prometheus_text_with_the_runtimes_figures(server: Any) -> None:
    from prometheus_client.parser import text_string_to_metric_families
    server.client.post("/v1/prefill", json={"token_ids": prompt(30, 200)})
    r = server.client.get("/metrics")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    families = {f.name: f for f in text_string_to_metric_families(r.text)}
    completed = [s.value for s in families["wavepp_requests"].samples
                 if s.name == "wavepp_requests_total" and s.labels.get("outcome") == "completed"]
    assert completed and completed[0] >= 1
    assert {"wavepp_prefill_latency_seconds", "wavepp_stage_busy_ratio", "wavepp_kv_blocks",
            "wavepp_input_tokens"} <= set(families)
    stages = {s.labels["stage"] for s in families["wavepp_kv_blocks"].samples}
    assert stages == {"0", "1"}                           # refreshed from the loop's status at the scrape
