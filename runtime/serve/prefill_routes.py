"""The prefill routes: ``POST /v1/prefill`` (one prompt: first token, reuse, timings, KV handle)
and OpenAI's ``POST /v1/completions`` (``max_tokens`` 0: no token, else the first one; streamed or
not). Both go through :func:`run_prefill`: ``503`` while draining or when the runtime stopped, ``429`` with
``Retry-After`` when the queue has no room, and a client that disconnects cancels its requests."""

# No `from __future__ import annotations`: FastAPI reads the request models from the handlers'
# annotations, which must be the classes themselves.

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from wavepp.runtime.serve.accepted import accepted_at, http_span
from wavepp.runtime.serve.errors import ERRORS, ApiError, ErrorResponse, queue_full_message
from wavepp.runtime.serve.models import (
    NEEDS_TOKENIZER,
    KvHandle,
    PrefillResponse,
    RequestModels,
    Timings,
    token_ids_problem,
)
from wavepp.runtime.serve.runtime import NotServing, PrefillResult, RequestFailed, ServerRuntime
from wavepp.runtime.sources.server import QueueFull


def add_prefill_routes(app: FastAPI, rt: ServerRuntime, models: RequestModels, served_model: str,
                       tokenizer: Any) -> None:
    vocab = rt.engine.vocab_size
    block_size = rt.engine.block_size
    # This server's request models (made at run time): pydantic's types, values to mypy.
    PrefillRequest: Any = models.prefill
    CompletionRequest: Any = models.completion

    async def tokenize(text: str, param: str) -> list[int]:
        if tokenizer is None:
            raise ApiError(422, NEEDS_TOKENIZER, param)
        ids: list[int] = await tokenizer.encode_off_loop(text)
        check_ids(ids, param)
        return ids

    def check_ids(ids: list[int], param: str) -> None:
        problem = token_ids_problem(ids, vocab, rt.max_prompt_tokens)
        if problem is not None:
            raise ApiError(422, problem, param)

    @app.post("/v1/prefill", response_model=PrefillResponse, responses=ERRORS)
    async def prefill(body: PrefillRequest, request: Request) -> PrefillResponse:
        """Prefill one prompt: its first token, reused and computed tokens, timings and KV handle."""
        if (body.token_ids is None) == (body.prompt is None):
            raise ApiError(422, "give exactly one of token_ids and prompt", "token_ids")
        if body.token_ids is not None:
            ids = body.token_ids
            check_ids(ids, "token_ids")
        else:
            assert body.prompt is not None
            ids = await tokenize(body.prompt, "prompt")
        [r] = await run_prefill(rt, request, [ids])
        return PrefillResponse(id=r.request_id, first_token=r.first_token, prompt_tokens=r.prompt_tokens,
                               reused_tokens=r.reused_tokens, computed_tokens=r.computed_tokens,
                               timings=Timings(prefill_s=r.prefill_s, server_s=r.server_s),
                               kv=KvHandle(request_id=r.request_id, block_size=block_size,
                                           block_tables=[list(t) for t in r.block_tables]))

    @app.post("/v1/completions", responses={**ERRORS, 200: {
        "description": "a text_completion object, or with stream=true server-sent events ending in [DONE]",
        "content": {"application/json": {}, "text/event-stream": {}}},
        404: {"model": ErrorResponse, "description": "the model is not the one this server serves"}})
    async def completions(body: CompletionRequest, request: Request) -> Response:
        """OpenAI-compatible completions for prefill: ``max_tokens`` 0 (no token) or more (the first
        token, ``finish_reason: "length"``); ``usage`` reports cached prompt tokens as
        ``prompt_tokens_details.cached_tokens`` (as vLLM and SGLang do)."""
        if body.model not in (None, served_model):
            raise ApiError(404, f"the model {body.model!r} does not exist (this server: {served_model!r})",
                           "model", "not_found_error")
        prompts = _prompt_list(body.prompt)
        if len(prompts) > rt.source.max_queue:       # could never fit the queue: a 429 would be retried forever
            raise ApiError(422, f"{len(prompts)} prompts in one request, more than the admission queue holds "
                                f"(--max-queue {rt.source.max_queue}): send at most {rt.source.max_queue}", "prompt")
        ids = [await tokenize(p, "prompt") if isinstance(p, str) else p for p in prompts]
        for one in ids:
            check_ids(one, "prompt")
        results = await run_prefill(rt, request, ids)
        max_tokens = 1 if body.max_tokens is None else body.max_tokens
        answer = completion_body(results, max_tokens, served_model, tokenizer)
        if not body.stream:
            return JSONResponse(answer)
        usage = body.stream_options is not None and body.stream_options.include_usage
        return StreamingResponse(sse(answer, usage), media_type="text/event-stream")


async def run_prefill(rt: ServerRuntime, request: Request, prompts: list[list[int]]) -> list[PrefillResult]:
    """Submit every prompt, answer when all finished; a disconnect cancels what is in flight. The
    HTTP request's span (:func:`runtime.serve.accepted.http_span`) times it from its acceptance."""
    accepted = accepted_at(request.scope)
    if not rt.serving or rt.draining:
        raise ApiError(503, "the server is draining (shutting down)" if rt.draining
                       else f"the runtime is not serving: {rt.error or 'starting'}", None,
                       "service_unavailable", {"Retry-After": "5"})
    if rt.source.queued + len(prompts) > rt.source.max_queue or not rt.can_accept():
        raise ApiError(429, queue_full_message(rt.source.queued, rt.source.max_queue, len(prompts)), None,
                       "rate_limit_exceeded", {"Retry-After": str(rt.retry_after_s())})
    reqs, futures = [], []
    try:
        for ids in prompts:
            req = rt.make_request(ids)
            futures.append(rt.submit(req))
            reqs.append(req)
    except (QueueFull, NotServing) as exc:
        for req in reqs:
            await rt.cancel(req.id)
        if isinstance(exc, NotServing):
            raise ApiError(503, str(exc), None, "service_unavailable", {"Retry-After": "5"}) from None
        raise ApiError(429, str(exc), None, "rate_limit_exceeded",
                       {"Retry-After": str(rt.retry_after_s())}) from None
    results: asyncio.Future[list[PrefillResult]] = asyncio.gather(
        *(rt.result(r, f, accepted) for r, f in zip(reqs, futures, strict=True)))
    # After a disconnect nobody reads the outcome (a cancelled request's RequestFailed, or the
    # CancelledError of results.cancel()): retrieved here so asyncio does not log it as lost.
    results.add_done_callback(lambda f: f.cancelled() or f.exception())
    gone: asyncio.Future[None] = asyncio.ensure_future(disconnected(request))
    route, rids, tokens = request.url.path, [r.id for r in reqs], sum(len(p) for p in prompts)
    client_id = request.headers.get("x-request-id")
    try:
        await asyncio.wait([results, gone], return_when=asyncio.FIRST_COMPLETED)  # type: ignore[type-var]
        if not results.done():           # the client went away: release what it holds
            for req in reqs:
                await rt.cancel(req.id)
            results.cancel()
            http_span(rt, route, accepted, rids, tokens, client_id, "client disconnected")
            raise ApiError(499, "client disconnected", None, "cancelled")
        try:
            answered = results.result()
        except RequestFailed as exc:
            http_span(rt, route, accepted, rids, tokens, client_id, str(exc))
            if not rt.serving or rt.draining:    # ended by the shutdown, not by the request itself
                raise ApiError(503, str(exc), None, "service_unavailable", {"Retry-After": "5"}) from None
            raise ApiError(500, str(exc), None, "server_error") from None
        http_span(rt, route, accepted, rids, tokens, client_id)
        return answered
    finally:
        gone.cancel()


def _prompt_list(prompt: Any) -> list[Any]:
    """OpenAI's prompt forms -> a list of prompts (text or token ids)."""
    if isinstance(prompt, str):
        return [prompt]
    if prompt and isinstance(prompt[0], int):
        return [prompt]
    return list(prompt)


def completion_body(results: list[PrefillResult], max_tokens: int, model: str, tokenizer: Any) -> dict[str, Any]:
    choices = []
    for i, r in enumerate(results):
        token = r.first_token if max_tokens else None
        text = tokenizer.decode([token]) if tokenizer is not None and token is not None else ""
        choices.append({"index": i, "text": text, "logprobs": None, "finish_reason": "length",
                        "token_ids": [token] if token is not None else [],
                        "kv_transfer_params": {"request_id": r.request_id,
                                               "block_tables": [list(t) for t in r.block_tables]}})
    prompt_tokens = sum(r.prompt_tokens for r in results)
    completion_tokens = sum(1 for r in results if max_tokens and r.first_token is not None)
    return {"id": f"cmpl-{uuid.uuid4().hex}", "object": "text_completion", "created": int(time.time()),
            "model": model, "choices": choices,
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                      "total_tokens": prompt_tokens + completion_tokens,
                      "prompt_tokens_details": {"cached_tokens": sum(r.reused_tokens for r in results)}}}


async def sse(answer: dict[str, Any], include_usage: bool) -> AsyncIterator[str]:
    """One chunk per choice, then (when asked) the usage chunk, then ``[DONE]``."""
    head = {k: answer[k] for k in ("id", "object", "created", "model")}
    for choice in answer["choices"]:
        yield f"data: {json.dumps({**head, 'choices': [choice], 'usage': None})}\n\n"
    if include_usage:
        yield f"data: {json.dumps({**head, 'choices': [], 'usage': answer['usage']})}\n\n"
    yield "data: [DONE]\n\n"


async def disconnected(request: Request) -> None:
    """Returns when the client closes its connection (the body was read already)."""
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            return
