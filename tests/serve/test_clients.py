"""What benchmark clients need of `wavepp serve` on the sim engine, driven by the official OpenAI client:
the built-in tokenizer announced by /v1/models, a deterministic first token with its text, chat
completions streamed and not, max_tokens above 1 answered as a prefill server answers it, a 100K-token
prompt where the model's context allows it, and the time to first token from the HTTP request's acceptance
in the spans and in /metrics."""

from __future__ import annotations

import json
import random
from array import array
from collections.abc import Iterator
from typing import Any

import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families
from tokenizers import Tokenizer

from wavepp.runtime.engines.sim.executor import sim_first_token
from wavepp.telemetry import names as N

PROMPT = "The pipeline runs each wave through every stage; the first token comes after the last stage."


@pytest.fixture(scope="module")
def server(server_class: Any) -> Iterator[Any]:
    srv = server_class("--engine", "sim", "--pp", "2", "--kv-blocks", "400", "--time-scale", "0.01")
    yield srv
    assert srv.stop() == 0, srv.errors()


@pytest.fixture(scope="module")
def client(server: Any) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0)


@pytest.fixture(scope="module")
def tokenizer(server: Any) -> Tokenizer:
    [model] = server.client.get("/v1/models").json()["data"]
    return Tokenizer.from_file(model["tokenizer"]["path"])


def test_models_announces_the_builtin_tokenizer_of_the_models_vocabulary(server: Any, tokenizer: Tokenizer) -> None:
    [model] = server.client.get("/v1/models").json()["data"]
    about = model["tokenizer"]
    assert about["name"] == "wavepp/bpe-128256" and tokenizer.get_vocab_size() == 128256   # llama-3-8b's
    assert about["path"].startswith(about["hf_home"]) and model["max_model_len"] == 8192


def test_the_sims_first_token_is_a_prompt_token_picked_by_the_prompt_with_its_text(
        client: openai.OpenAI, tokenizer: Tokenizer) -> None:
    ids = tokenizer.encode(PROMPT).ids
    answers = [client.completions.create(model="llama-3-8b", prompt=PROMPT, max_tokens=1) for _ in range(2)]
    tokens = [a.choices[0].model_extra["token_ids"] for a in answers]
    assert tokens[0] == tokens[1] == [sim_first_token(array("I", ids))]   # deterministic
    assert tokens[0][0] in ids
    first = answers[0]
    assert first.choices[0].text == tokenizer.decode(tokens[0]) and first.choices[0].text.strip()
    assert first.usage is not None and first.usage.completion_tokens == len(tokens[0]) == 1
    assert first.usage.prompt_tokens == len(ids)
    other = client.completions.create(model="llama-3-8b", prompt=PROMPT + " Twice.", max_tokens=1)
    assert other.choices[0].model_extra["token_ids"][0] in tokenizer.encode(PROMPT + " Twice.").ids
    none = client.completions.create(model="llama-3-8b", prompt=PROMPT, max_tokens=0)
    assert none.choices[0].text == "" and none.choices[0].model_extra["token_ids"] == []
    assert none.usage is not None and none.usage.completion_tokens == 0


def test_max_tokens_above_one_gets_the_first_token_and_finish_reason_length(client: openai.OpenAI) -> None:
    for form in ({"prompt": PROMPT}, {"prompt": [5, 6, 7, 8]}):
        many = client.completions.create(model="llama-3-8b", max_tokens=500, **form)   # type: ignore[call-overload]
        assert many.choices[0].finish_reason == "length" and len(many.choices[0].model_extra["token_ids"]) == 1
        assert many.usage is not None and many.usage.completion_tokens == 1
    chat = client.chat.completions.create(model="llama-3-8b", messages=[{"role": "user", "content": PROMPT}],
                                          max_completion_tokens=300)
    assert chat.choices[0].finish_reason == "length" and chat.usage is not None and chat.usage.completion_tokens == 1


def test_chat_completions_with_the_openai_client(client: openai.OpenAI, tokenizer: Tokenizer) -> None:
    messages: Any = [{"role": "system", "content": "Be brief."},
                     {"role": "user", "content": [{"type": "text", "text": PROMPT}]}]
    rendered = f"system: Be brief.\nuser: {PROMPT}\nassistant:"           # the documented plain template
    ids = tokenizer.encode(rendered).ids
    chat = client.chat.completions.create(model="llama-3-8b", messages=messages)
    assert chat.object == "chat.completion" and chat.choices[0].message.role == "assistant"
    assert chat.usage is not None and chat.usage.prompt_tokens == len(ids) and chat.usage.completion_tokens == 1
    [token] = chat.choices[0].model_extra["token_ids"]
    assert token in ids and chat.choices[0].message.content == tokenizer.decode([token])

    stream = client.chat.completions.create(model="llama-3-8b", messages=messages, stream=True,
                                            stream_options={"include_usage": True})
    chunks = list(stream)
    assert all(c.object == "chat.completion.chunk" for c in chunks)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == chat.choices[0].message.content                        # same prompt, same first token
    assert [c.choices[0].finish_reason for c in chunks if c.choices] == [None, "length"]
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 1
    assert chunks[-1].usage.prompt_tokens_details is not None       # the prompt's whole blocks were cached before
    assert chunks[-1].usage.prompt_tokens_details.cached_tokens == len(ids) // 64 * 64


def test_chat_errors_and_limits_are_those_of_completions(server: Any, client: openai.OpenAI) -> None:
    with pytest.raises(openai.NotFoundError, match="does not exist"):
        client.chat.completions.create(model="gpt-4", messages=[{"role": "user", "content": "hi"}])
    long = " ".join(f"w{i}" for i in range(9000))
    with pytest.raises(openai.UnprocessableEntityError, match="longer than the limit"):
        client.chat.completions.create(model="llama-3-8b", messages=[{"role": "user", "content": long}])
    for body, param in (({"messages": []}, "messages"), ({"messages": [{"role": "robot", "content": "x"}]}, "messages"),
                        ({"messages": [{"role": "user", "content": "x"}], "n": 2}, "n"),
                        ({"messages": [{"role": "user", "content": "x"}], "max_tokens": -1}, "max_tokens")):
        r = server.client.post("/v1/chat/completions", json=body)
        assert r.status_code == 422 and r.json()["error"]["param"] == param, r.text
    assert server.client.get("/health").status_code == 200


def test_time_to_first_token_from_acceptance_in_spans_and_metrics(server: Any, client: openai.OpenAI) -> None:
    def count() -> float:
        families = {f.name: f for f in text_string_to_metric_families(server.client.get("/metrics").text)}
        family = families.get("wavepp_time_to_first_token_seconds")
        return sum(s.value for s in family.samples if s.name.endswith("_count")
                   and s.labels["route"] == "/v1/chat/completions") if family else 0.0

    before, last = count(), server.client.get("/v1/spans").json()["last"]
    for i in range(3):
        client.chat.completions.create(model="llama-3-8b", messages=[{"role": "user", "content": f"{PROMPT} {i}"}],
                                       extra_headers={"X-Request-ID": f"client-{i}"})
    assert count() == before + 3
    spans = server.client.get("/v1/spans", params={"after": last}).json()["spans"]
    http = [s for s in spans if s["n"] == N.HTTP_REQUEST]
    requests = {s["a"][N.REQUEST_ID]: s for s in spans if s["n"] == N.REQUEST}
    assert len(http) == 3
    for s in http:
        ttft = s["a"][N.TTFT]
        assert s["a"][N.HTTP_ROUTE] == "/v1/chat/completions" and ttft == pytest.approx((s["t1"] - s["t0"]) / 1e9,
                                                                                        abs=1e-3)
        assert s["a"][N.HTTP_CLIENT_ID].startswith("client-")     # the client's id finds the server's span
        [rid] = s["a"][N.HTTP_REQUEST_IDS]
        inner = requests[rid]                       # the loop's own span lies inside the HTTP one
        assert s["t0"] <= inner["t0"] and inner["t1"] <= s["t1"] and ttft >= (inner["t1"] - inner["t0"]) / 1e9
    assert json.dumps(http)                         # plain JSON (the span stream and OTLP carry it)


@pytest.fixture(scope="module")
def long_server(server_class: Any) -> Iterator[Any]:
    srv = server_class("--engine", "sim", "--model", "glm-5.2", "--pp", "2", "--kv-blocks", "2000",
                       "--time-scale", "0.001", "--max-body-bytes", str(8 << 20))
    yield srv
    assert srv.stop() == 0, srv.errors()


def test_a_100k_token_prompt_on_a_model_whose_context_allows_it(long_server: Any) -> None:
    [model] = long_server.client.get("/v1/models").json()["data"]
    assert model["max_model_len"] == 2000 * 64        # the KV pool bounds it here; the context (1M) would allow more
    rng = random.Random(7)
    ids = [rng.randrange(154880) for _ in range(100_000)]
    r = long_server.client.post("/v1/completions", json={"prompt": ids, "max_tokens": 64})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["usage"]["prompt_tokens"] == 100_000 and body["choices"][0]["token_ids"][0] in ids
    assert len(body["choices"][0]["kv_transfer_params"]["block_tables"][0]) == -(-100_000 // 64)
