"""OpenAI's ``POST /v1/chat/completions`` for prefill, streamed or not: the messages rendered to one
prompt (:func:`render_chat`), tokenized by the server's tokenizer and prefilled like a completions
prompt - the same limits, errors, backpressure and cancellation (:func:`prefill_routes.run_prefill`),
and the same answer: the first token, ``finish_reason: "length"``, ``usage`` with cached tokens.

The template is plain text, the same for every model (a prefill's cost depends on the tokens, not
on the words that frame them)::

    <role>: <content>\\n        for each message, in order
    assistant:                  the generation prompt

A message's content is text, or a list of text parts (``{"type": "text", "text": ...}``), joined."""

# No `from __future__ import annotations`: FastAPI and pydantic read these annotations at run time.

import json
import time
import uuid
from collections.abc import AsyncIterator
from typing import Annotated, Any, Literal

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field, StrictBool

from wavepp.runtime.serve.errors import ERRORS, ApiError, ErrorResponse
from wavepp.runtime.serve.models import MAX_TOKENS_HELP, StreamOptions, json_int, token_ids_problem
from wavepp.runtime.serve.prefill_routes import run_prefill
from wavepp.runtime.serve.runtime import PrefillResult, ServerRuntime

ROLES = ("system", "developer", "user", "assistant", "tool")
GENERATION_PROMPT = "assistant:"
CHAT_NEEDS_TOKENIZER = ("chat messages need a tokenizer (this server runs with --tokenizer none); send token ids "
                        "to /v1/completions instead")


class TextPart(BaseModel):
    model_config = ConfigDict(extra="allow")
    type: Literal["text"]
    text: str


class Message(BaseModel):
    model_config = ConfigDict(extra="allow")        # name, tool_calls, ...: accepted, not rendered
    role: Literal[ROLES]                            # type: ignore[valid-type]
    content: str | Annotated[list[TextPart], Field(min_length=1)] | None = None


class ChatRequest(BaseModel):
    """OpenAI's chat completions request; sampling fields a prefill does not use are accepted and ignored."""
    model_config = ConfigDict(extra="allow")
    model: str | None = None
    messages: Annotated[list[Message], Field(min_length=1)]
    max_tokens: json_int(ge=0) | None = Field(default=None, description=MAX_TOKENS_HELP)  # type: ignore[valid-type]
    max_completion_tokens: json_int(ge=0) | None = Field(  # type: ignore[valid-type]
        default=None, description="as max_tokens (OpenAI's newer name; it wins when both are given)")
    n: json_int(ge=1, le=1) = 1  # type: ignore[valid-type]
    stream: StrictBool = False
    stream_options: StreamOptions | None = None


def render_chat(messages: list[Message]) -> str:
    """The prompt of a conversation: ``role: content`` lines, then the generation prompt."""
    lines = []
    for m in messages:
        content = m.content if isinstance(m.content, str) else "".join(p.text for p in m.content or ())
        lines.append(f"{m.role}: {content}\n")
    return "".join(lines) + GENERATION_PROMPT


def add_chat_routes(app: FastAPI, rt: ServerRuntime, served_model: str, tokenizer: Any) -> None:
    vocab = rt.engine.vocab_size

    @app.post("/v1/chat/completions", responses={**ERRORS, 200: {
        "description": "a chat.completion object, or with stream=true chat.completion.chunk events ending in [DONE]",
        "content": {"application/json": {}, "text/event-stream": {}}},
        404: {"model": ErrorResponse, "description": "the model is not the one this server serves"}})
    async def chat_completions(body: ChatRequest, request: Request) -> Response:
        """OpenAI-compatible chat completions for prefill: the messages in the plain template (this
        module's docstring), ``max_tokens`` as in ``/v1/completions``."""
        if body.model not in (None, served_model):
            raise ApiError(404, f"the model {body.model!r} does not exist (this server: {served_model!r})",
                           "model", "not_found_error")
        if tokenizer is None:
            raise ApiError(422, CHAT_NEEDS_TOKENIZER, "messages")
        ids = await tokenizer.encode_off_loop(render_chat(body.messages))
        problem = token_ids_problem(ids, vocab, rt.max_prompt_tokens)
        if problem is not None:
            raise ApiError(422, problem, "messages")
        [result] = await run_prefill(rt, request, [ids])
        limit = body.max_completion_tokens if body.max_completion_tokens is not None else body.max_tokens
        answer = chat_body(result, 1 if limit is None else limit, served_model, tokenizer)
        if not body.stream:
            return JSONResponse(answer)
        usage = body.stream_options is not None and body.stream_options.include_usage
        return StreamingResponse(chat_sse(answer, usage), media_type="text/event-stream")


def chat_body(r: PrefillResult, max_tokens: int, model: str, tokenizer: Any) -> dict[str, Any]:
    token = r.first_token if max_tokens else None
    ids = [token] if token is not None else []
    text = tokenizer.decode(ids) if ids else ""
    completion_tokens = len(ids)
    return {"id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion", "created": int(time.time()),
            "model": model,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "logprobs": None,
                         "finish_reason": "length", "token_ids": ids,
                         "kv_transfer_params": {"request_id": r.request_id,
                                                "block_tables": [list(t) for t in r.block_tables]}}],
            "usage": {"prompt_tokens": r.prompt_tokens, "completion_tokens": completion_tokens,
                      "total_tokens": r.prompt_tokens + completion_tokens,
                      "prompt_tokens_details": {"cached_tokens": r.reused_tokens}}}


async def chat_sse(answer: dict[str, Any], include_usage: bool) -> AsyncIterator[str]:
    """OpenAI's chunks: the assistant's role with the token's text, then the finish reason (with the
    token ids and KV handle), then (when asked) the usage chunk, then ``[DONE]``."""
    head = {"id": answer["id"], "object": "chat.completion.chunk", "created": answer["created"],
            "model": answer["model"]}
    [choice] = answer["choices"]
    content = {"index": 0, "delta": {"role": "assistant", "content": choice["message"]["content"]},
               "logprobs": None, "finish_reason": None}
    end = {"index": 0, "delta": {}, "logprobs": None, "finish_reason": choice["finish_reason"],
           "token_ids": choice["token_ids"], "kv_transfer_params": choice["kv_transfer_params"]}
    for part in (content, end):
        yield f"data: {json.dumps({**head, 'choices': [part], 'usage': None})}\n\n"
    if include_usage:
        yield f"data: {json.dumps({**head, 'choices': [], 'usage': answer['usage']})}\n\n"
    yield "data: [DONE]\n\n"
