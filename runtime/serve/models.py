"""The API's request and response bodies (pydantic). The request models depend on the server -
its vocabulary, prompt limit, block size and whether it has a tokenizer - so :func:`request_models`
makes them for one server; the schema at ``/openapi.json`` states each limit."""

# No `from __future__ import annotations`: pydantic reads these annotations at run time.

import dataclasses
from typing import Annotated, Any, NamedTuple

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, StrictBool, WithJsonSchema

from wavepp.runtime.control.knobs import Knobs, in_blocks, int_range
from wavepp.runtime.control.knobs import choices as knob_choices
from wavepp.runtime.control.knobs import kind as knob_kind

MAX_PROMPTS = 64          # prompts in one completions request
# A prefill server answers one token at most (a decode server, given the KV handle, makes the rest): a
# larger max_tokens is answered with the first token and finish_reason "length", as prefill servers of
# disaggregated deployments answer it, so clients that send each request's output length still work.
MAX_TOKENS_HELP = ("0: prefill only, no token; 1 or more (default 1): the first token, finish_reason "
                   "\"length\" (a prefill server makes one token)")


class KvHandle(BaseModel):
    request_id: str
    block_size: int
    block_tables: list[list[int]] = Field(description="per stage, the request's KV block ids")


class Timings(BaseModel):
    prefill_s: float = Field(description="arrival in the pipeline loop to the last stage's completion")
    server_s: float = Field(description="accepted by the server to answered")


class PrefillResponse(BaseModel):
    id: str
    first_token: int | None = Field(description="argmax of the last position (the sim: one of the prompt's "
                                                "tokens, chosen by a hash of the prompt)")
    prompt_tokens: int
    reused_tokens: int
    computed_tokens: int
    timings: Timings
    kv: KvHandle


class StreamOptions(BaseModel):
    include_usage: StrictBool = False


def _json_int(value: Any) -> Any:
    """A JSON number that is a whole number (``3`` or ``3.0``, as JSON Schema's integer); never a bool
    or a string of digits (pydantic's lax mode would take ``true`` and ``"12"``)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError("must be an integer")
    if isinstance(value, float) and not value.is_integer():
        raise ValueError("must be a whole number")
    return int(value)


NEEDS_TOKENIZER = "prompts as text need a tokenizer (start the server with --tokenizer); send token ids instead"


def token_ids_problem(ids: list[Any], vocab: int, max_tokens: int) -> str | None:
    """What is wrong with one prompt of token ids, or None."""
    if not ids:
        return "the prompt has no tokens"
    if len(ids) > max_tokens:
        return f"prompt of {len(ids)} tokens is longer than the limit ({max_tokens})"
    for i, t in enumerate(ids):
        if isinstance(t, bool) or not isinstance(t, int | float) or (isinstance(t, float) and not t.is_integer()):
            return f"token {i}: must be an integer, got {t!r}"    # 2.0 is one (JSON Schema's integer)
        if not 0 <= t < vocab:
            return f"token id {t} is outside the vocabulary [0, {vocab})"
    return None


def completion_prompt_check(vocab: int, max_tokens: int, text: bool) -> Any:
    """OpenAI's prompt forms (text, token ids, a list of either) checked by shape first, so a bad
    prompt gets one message saying what is wrong with it - not every branch of the union's
    complaint (65 prompts were "must be an integer" eight times)."""
    def check(value: Any) -> Any:
        if isinstance(value, str):
            if not text:
                raise ValueError(NEEDS_TOKENIZER)
            return value
        if not isinstance(value, list) or not value:
            raise ValueError("must be text, token ids, or a non-empty list of either")
        if all(isinstance(v, list | str) for v in value):
            if len(value) > MAX_PROMPTS:
                raise ValueError(f"at most {MAX_PROMPTS} prompts in one request, got {len(value)}")
            for i, one in enumerate(value):
                if isinstance(one, str) and not text:
                    raise ValueError(NEEDS_TOKENIZER)
                problem = token_ids_problem(one, vocab, max_tokens) if isinstance(one, list) else None
                if problem is not None:
                    raise ValueError(f"prompt {i}: {problem}")
            return value
        problem = token_ids_problem(value, vocab, max_tokens)
        if problem is not None:
            raise ValueError(problem)
        return value
    return BeforeValidator(check)


def _no_text(value: Any) -> Any:
    if value is not None:
        raise ValueError(NEEDS_TOKENIZER)
    return value


def json_int(**constraints: Any) -> Any:
    """An integer field type with its range; the constraints come first so the schema states them."""
    return Annotated[int, Field(**constraints), BeforeValidator(_json_int)]


def knob_changes_schema(block_size: int) -> dict[str, Any]:
    """The JSON Schema of ``PUT /v1/knobs``'s ``changes``: each knob with its type and range
    (``runtime.control.knobs``), for the API's description. It validates nothing: the write is checked by
    the same code as ``wavepp knobs --set`` (``runtime.control.knobs.validated_values``), so both name a
    bad knob with the same message - and pairs (b_min <= M) and the policy grammar need it anyway."""
    properties: dict[str, Any] = {}
    for f in dataclasses.fields(Knobs):
        if knob_kind(f.name) == "bool":
            properties[f.name] = {"type": "boolean"}
        elif f.name == "policy":
            properties[f.name] = {"type": "string", "description": "a preset or NAME+KIND=VARIANT"}
        elif knob_kind(f.name) == "choice":
            properties[f.name] = {"enum": list(knob_choices(f.name))}
        else:
            lo, hi = int_range(f.name)
            step = {"multipleOf": block_size} if in_blocks(f.name) else {}
            properties[f.name] = {"type": "integer", "minimum": lo, "maximum": hi, **step}
    return {"type": "object", "properties": properties, "additionalProperties": False, "minProperties": 1,
            "description": "knobs to change (validated like `wavepp knobs --set`)"}


class RequestModels(NamedTuple):
    """The request bodies of one server (classes made at run time: mypy sees them as values)."""

    prefill: Any              # POST /v1/prefill
    completion: Any           # POST /v1/completions
    knobs_update: Any         # PUT /v1/knobs


def request_models(vocab: int, max_prompt_tokens: int, block_size: int, tokenizer: Any = None) -> RequestModels:
    """The request models for a server of this vocabulary, prompt limit and block size; text prompts
    only where it has a ``tokenizer``."""
    # Types made for this server (vocabulary, prompt limit): mypy sees them as values, pydantic as types.
    # A token id is JSON Schema's integer, as the schema says: 2.0 is token 2, 2.5 is refused.
    TokenIds: Any = Annotated[list[json_int(ge=0, lt=vocab)],  # type: ignore[misc]
                              Field(min_length=1, max_length=max_prompt_tokens)]
    Prompts: Any = Annotated[list[TokenIds], Field(min_length=1, max_length=MAX_PROMPTS)]
    if tokenizer is None:           # the schema offers text only where the server can tokenize it
        class PrefillRequest(BaseModel):
            model_config = ConfigDict(extra="forbid")
            # prompt first: a text prompt's error (no tokenizer) is named before the missing token_ids
            prompt: Annotated[None, BeforeValidator(_no_text)] = Field(
                default=None, description="text prompts need a server started with --tokenizer")
            token_ids: TokenIds = Field(description="the prompt as token ids")

        CompletionPrompt: Any = TokenIds | Prompts
    else:
        class PrefillRequest(BaseModel):          # type: ignore[no-redef]
            model_config = ConfigDict(extra="forbid", json_schema_extra={
                "oneOf": [{"required": ["token_ids"]}, {"required": ["prompt"]}]})
            token_ids: TokenIds | None = Field(default=None,
                                               description="the prompt as token ids")
            prompt: str | None = Field(default=None, min_length=1, description="the prompt as text")

        CompletionPrompt = (str | TokenIds | Annotated[list[Annotated[str, Field(min_length=1)]],
                                                       Field(min_length=1, max_length=MAX_PROMPTS)] | Prompts)

    class CompletionRequest(BaseModel):
        """OpenAI's completions request; sampling fields a prefill does not use are accepted and ignored."""
        model_config = ConfigDict(extra="allow")
        model: str | None = None
        prompt: Annotated[CompletionPrompt, completion_prompt_check(vocab, max_prompt_tokens, tokenizer is not None)]
        max_tokens: json_int(ge=0) | None = Field(default=None,  # type: ignore[valid-type]
                                       description=MAX_TOKENS_HELP)
        n: json_int(ge=1, le=1) = 1  # type: ignore[valid-type]
        stream: StrictBool = False
        stream_options: StreamOptions | None = None

    KnobChanges: Any = Annotated[dict[str, Any], Field(min_length=1), WithJsonSchema(knob_changes_schema(block_size))]

    class KnobsUpdate(BaseModel):
        model_config = ConfigDict(extra="forbid")
        changes: KnobChanges
        expected_version: json_int(ge=0) | None = Field(default=None,  # type: ignore[valid-type]
                                             description="refuse the write (409) if the version moved")

    return RequestModels(PrefillRequest, CompletionRequest, KnobsUpdate)
