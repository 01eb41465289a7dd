"""The HTTP API of ``wavepp serve`` (FastAPI; its OpenAPI schema at ``/openapi.json``).

Every error is one JSON shape, OpenAI's: ``{"error": {"message", "type", "param", "code"}}`` -
``param`` names the field at fault (``token_ids``, ``max_tokens``, ``body``). Backpressure:
``429`` with ``Retry-After`` when the admission queue is full, ``503`` while draining or when the
runtime stopped, ``413`` for a body past ``--max-body-bytes``, ``422`` for a prompt that is too
long or malformed, or for more prompts in one request than the queue ever holds. A client that
disconnects before its answer cancels its request. With an admin token (``WAVEPP_ADMIN_TOKEN``) a
knob write without it is ``401`` (:func:`admin_guard`).
"""

# No `from __future__ import annotations`: FastAPI reads the request models of create_app from the
# handlers' annotations, which must be the classes themselves.

import asyncio
import dataclasses
import hmac
import json
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Annotated, Any, Literal

from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, StrictBool, create_model
from starlette.exceptions import HTTPException as StarletteHTTPException

from wavepp.runtime.knobs import KnobError, Knobs, in_blocks, int_range, validated_values
from wavepp.runtime.knobs import choices as knob_choices
from wavepp.runtime.knobs import kind as knob_kind
from wavepp.runtime.serve.runtime import NotServing, PrefillResult, RequestFailed, ServerRuntime
from wavepp.runtime.server_source import QueueFull
from wavepp.store.base import StoreError

MAX_PROMPTS = 64          # prompts in one completions request
MAX_PROBLEMS = 8          # validation problems named in one error message


class ApiError(Exception):
    def __init__(self, status: int, message: str, param: str | None = None, kind: str = "invalid_request_error",
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.param, self.kind, self.headers = status, message, param, kind, headers


def error_body(status: int, message: str, param: str | None, kind: str) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "param": param, "code": status}}


class ErrorDetail(BaseModel):
    message: str
    type: str
    param: str | None
    code: int


class ErrorResponse(BaseModel):
    error: ErrorDetail


ERRORS: dict[int | str, dict[str, Any]] = {
    code: {"model": ErrorResponse, "description": why} for code, why in (
        (413, "the request body is larger than --max-body-bytes"),
        (422, "a field is malformed or out of range (param names it)"),
        (429, "the admission queue is full: retry after Retry-After seconds"),
        (500, "the runtime failed the request"),
        (503, "draining (SIGTERM), starting, or the runtime stopped"))}


def admin_guard(token: str | None) -> Callable[[Request], None]:
    """A dependency of the endpoints that change the server (knob writes). With an admin ``token``
    a request must carry ``Authorization: Bearer <token>``, compared in constant time; otherwise it
    is 401 with ``WWW-Authenticate`` (RFC 6750), before its body is validated. Without a token
    anyone who reaches the port may write: the server listens on loopback by default."""
    expected = token.encode() if token else None

    def guard(request: Request) -> None:
        if expected is None:
            return
        scheme, _, given = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not given.strip():
            raise ApiError(401, "changing knobs needs the admin token: send Authorization: Bearer <token>", None,
                           "authentication_error", {"WWW-Authenticate": 'Bearer realm="wavepp"'})
        if not hmac.compare_digest(given.strip().encode(), expected):
            raise ApiError(401, "the admin token is wrong", None, "authentication_error",
                           {"WWW-Authenticate": 'Bearer realm="wavepp", error="invalid_token"'})
    return guard


class KvHandle(BaseModel):
    request_id: str
    block_size: int
    block_tables: list[list[int]] = Field(description="per stage, the request's KV block ids")


class Timings(BaseModel):
    prefill_s: float = Field(description="arrival in the pipeline loop to the last stage's completion")
    server_s: float = Field(description="accepted by the server to answered")


class PrefillResponse(BaseModel):
    id: str
    first_token: int | None = Field(description="argmax of the last position (null on the sim engine)")
    prompt_tokens: int
    reused_tokens: int
    computed_tokens: int
    timings: Timings
    kv: KvHandle


def knob_changes_model(block_size: int) -> type[BaseModel]:
    """Each knob as an optional field with its type and range (``runtime.knobs``); pairs (b_min <= M)
    and the policy's ablation grammar are checked on write by the same code as ``wavepp knobs``."""
    fields: dict[str, Any] = {}
    for f in dataclasses.fields(Knobs):
        if knob_kind(f.name) == "bool":
            fields[f.name] = (StrictBool | None, None)
        elif f.name == "policy":
            fields[f.name] = (str | None, Field(default=None, description="a preset or NAME+KIND=VARIANT"))
        elif knob_kind(f.name) == "choice":
            fields[f.name] = (Literal[knob_choices(f.name)] | None, None)  # type: ignore[valid-type]
        else:
            lo, hi = int_range(f.name)
            step = block_size if in_blocks(f.name) else None
            fields[f.name] = (json_int(ge=lo, le=hi, multiple_of=step) | None, None)
    return create_model("KnobChanges", __config__=ConfigDict(extra="forbid"), **fields)


def _json_int(value: Any) -> Any:
    """A JSON number that is a whole number (``3`` or ``3.0``, as JSON Schema's integer); never a bool
    or a string of digits (pydantic's lax mode would take ``true`` and ``"12"``)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError("must be an integer")
    if isinstance(value, float) and not value.is_integer():
        raise ValueError("must be a whole number")
    return int(value)


def json_int(**constraints: Any) -> Any:
    """An integer field type with its range; the constraints come first so the schema states them."""
    return Annotated[int, Field(**constraints), BeforeValidator(_json_int)]


class StreamOptions(BaseModel):
    include_usage: StrictBool = False


def create_app(rt: ServerRuntime, served_model: str, tokenizer: Any = None, admin_token: str | None = None) -> FastAPI:
    """The API over one :class:`ServerRuntime` (started and stopped by the caller); ``admin_token``:
    what knob writes need (:func:`admin_guard`)."""
    vocab = rt.engine.vocab_size
    block_size = rt.engine.block_size
    # Types made for this server (vocabulary, prompt limit): mypy sees them as values, pydantic as types.
    TokenIds: Any = Annotated[list[json_int(ge=0, lt=vocab)],  # type: ignore[misc]
                              Field(min_length=1, max_length=rt.max_prompt_tokens)]
    Prompts: Any = Annotated[list[TokenIds], Field(min_length=1, max_length=MAX_PROMPTS)]  # type: ignore[valid-type]
    if tokenizer is None:           # the schema offers text only where the server can tokenize it
        class PrefillRequest(BaseModel):
            model_config = ConfigDict(extra="forbid")
            token_ids: TokenIds = Field(description="the prompt as token ids")  # type: ignore[valid-type]
            prompt: None = Field(default=None, description="text prompts need a server started with --tokenizer")

        CompletionPrompt: Any = TokenIds | Prompts
    else:
        class PrefillRequest(BaseModel):          # type: ignore[no-redef]
            model_config = ConfigDict(extra="forbid", json_schema_extra={
                "oneOf": [{"required": ["token_ids"]}, {"required": ["prompt"]}]})
            token_ids: TokenIds | None = Field(default=None,  # type: ignore[valid-type]
                                               description="the prompt as token ids")
            prompt: str | None = Field(default=None, min_length=1, description="the prompt as text")

        CompletionPrompt = (str | TokenIds | Annotated[list[Annotated[str, Field(min_length=1)]],
                                                       Field(min_length=1, max_length=MAX_PROMPTS)] | Prompts)

    class CompletionRequest(BaseModel):
        """OpenAI's completions request; sampling fields a prefill does not use are accepted and ignored."""
        model_config = ConfigDict(extra="allow")
        model: str | None = None
        prompt: CompletionPrompt
        max_tokens: json_int(ge=0, le=1) | None = Field(default=None,  # type: ignore[valid-type]
                                       description="0 (prefill only) or 1 (the first token); default 1")
        n: json_int(ge=1, le=1) = 1  # type: ignore[valid-type]
        stream: StrictBool = False
        stream_options: StreamOptions | None = None

    KnobChanges = knob_changes_model(block_size)

    class KnobsUpdate(BaseModel):
        model_config = ConfigDict(extra="forbid")
        changes: KnobChanges = Field(description="knobs to change (validated like `wavepp knobs --set`)")  # type: ignore[valid-type]
        expected_version: json_int(ge=0) | None = Field(default=None,  # type: ignore[valid-type]
                                             description="refuse the write (409) if the version moved")

    app = FastAPI(title="WavePP prefill server", version="1",
                  description="Pipeline-parallel prefill: first token, reuse and the KV handle of each prompt.")

    @app.exception_handler(ApiError)
    async def api_error(request: Request, exc: ApiError) -> JSONResponse:
        return JSONResponse(error_body(exc.status, exc.message, exc.param, exc.kind), exc.status, exc.headers)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        # FastAPI's own refusals in our one shape; a body it cannot decode (400) is a malformed body: 422.
        status, param = (422, "body") if exc.status_code == 400 else (exc.status_code, None)
        message = f"body: {exc.detail}" if param else str(exc.detail)
        return JSONResponse(error_body(status, message, param, "invalid_request_error"), status,
                            getattr(exc, "headers", None))

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        problems = [(_field_of(e.get("loc", ())), e.get("msg", "invalid")) for e in exc.errors()[:MAX_PROBLEMS]]
        problems = problems or [("body", "invalid request")]
        message = "; ".join(f"{param}: {msg}" for param, msg in problems)
        return JSONResponse(error_body(422, message, problems[0][0], "invalid_request_error"), 422)

    def tokenize(text: str, param: str) -> list[int]:
        if tokenizer is None:
            raise ApiError(422, "prompts as text need a tokenizer (start the server with --tokenizer); "
                                "send token ids instead", param)
        ids = list(tokenizer.encode(text))
        check_ids(ids, param)
        return ids

    def check_ids(ids: list[int], param: str) -> None:
        if not ids:
            raise ApiError(422, "the prompt has no tokens", param)
        if len(ids) > rt.max_prompt_tokens:
            raise ApiError(422, f"prompt of {len(ids)} tokens is longer than the limit ({rt.max_prompt_tokens})",
                           param)
        bad = next((t for t in ids if not 0 <= t < vocab), None)
        if bad is not None:
            raise ApiError(422, f"token id {bad} is outside the vocabulary [0, {vocab})", param)

    async def run_prefill(request: Request, prompts: list[list[int]]) -> list[PrefillResult]:
        """Submit every prompt, answer when all finished; a disconnect cancels what is in flight."""
        accepted = time.monotonic()
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
        try:
            await asyncio.wait([results, gone], return_when=asyncio.FIRST_COMPLETED)  # type: ignore[type-var]
            if not results.done():           # the client went away: release what it holds
                for req in reqs:
                    await rt.cancel(req.id)
                results.cancel()
                raise ApiError(499, "client disconnected", None, "cancelled")
            try:
                return results.result()
            except RequestFailed as exc:
                if not rt.serving or rt.draining:    # ended by the shutdown, not by the request itself
                    raise ApiError(503, str(exc), None, "service_unavailable", {"Retry-After": "5"}) from None
                raise ApiError(500, str(exc), None, "server_error") from None
        finally:
            gone.cancel()

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
            ids = tokenize(body.prompt, "prompt")
        [r] = await run_prefill(request, [ids])
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
        """OpenAI-compatible completions for prefill: ``max_tokens`` 0 or 1; ``usage`` reports cached
        prompt tokens as ``prompt_tokens_details.cached_tokens`` (as vLLM and SGLang do)."""
        if body.model not in (None, served_model):
            raise ApiError(404, f"the model {body.model!r} does not exist (this server: {served_model!r})",
                           "model", "not_found_error")
        prompts = _prompt_list(body.prompt)
        if len(prompts) > rt.source.max_queue:       # could never fit the queue: a 429 would be retried forever
            raise ApiError(422, f"{len(prompts)} prompts in one request, more than the admission queue holds "
                                f"(--max-queue {rt.source.max_queue}): send at most {rt.source.max_queue}", "prompt")
        ids = [tokenize(p, "prompt") if isinstance(p, str) else p for p in prompts]
        for one in ids:
            check_ids(one, "prompt")
        results = await run_prefill(request, ids)
        max_tokens = 1 if body.max_tokens is None else body.max_tokens
        answer = completion_body(results, max_tokens, served_model, tokenizer)
        if not body.stream:
            return JSONResponse(answer)
        usage = body.stream_options is not None and body.stream_options.include_usage
        return StreamingResponse(sse(answer, usage), media_type="text/event-stream")

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        return {"object": "list", "data": [{"id": served_model, "object": "model", "created": int(rt.started_at),
                                            "owned_by": "wavepp", "max_model_len": rt.max_prompt_tokens}]}

    @app.get("/health")
    async def health() -> dict[str, str]:
        """Liveness: the process answers."""
        return {"status": "ok"}

    @app.get("/ready", responses={503: {"description": "stages not up, store unreachable, or draining"}})
    async def ready() -> JSONResponse:
        """Readiness: the loop runs its stages, the store answers, and the server is not draining."""
        store = await rt.store_reachable()
        ok = rt.serving and store and not rt.draining
        body = {"ready": ok, "stages": rt.engine.pp if rt.serving else 0, "store": store, "draining": rt.draining,
                "error": rt.error}
        return JSONResponse(body, 200 if ok else 503)

    @app.get("/metrics", response_class=PlainTextResponse,
             responses={200: {"content": {"text/plain": {}}, "description": "Prometheus text exposition"}})
    async def metrics() -> Response:
        """Prometheus metrics (telemetry/metrics.py): stage busy fraction, admission cadence, prefill
        latency, tokens, KV blocks, queues."""
        body, content_type = await rt.prometheus()
        return Response(body, media_type=content_type)

    @app.get("/v1/state")
    async def state() -> dict[str, Any]:
        """Stages (cache, leases, escrow), queues, wave budget and the server's own queue."""
        return await rt.state()

    @app.get("/v1/spans")
    async def spans(after: Annotated[int, Field(ge=0)] = 0) -> dict[str, Any]:
        """Finished spans (compact form) after sequence number ``after``: `wavepp bench --url` computes
        the in-process bench's figures from them."""
        items, last = rt.ring.read(after)
        return {"spans": items, "last": last, "pp": rt.engine.pp, "block_size": block_size, "vocab_size": vocab,
                "max_prompt_tokens": rt.max_prompt_tokens,
                "default_prompt_tokens": min(rt.engine.default_prompt_tokens(), rt.max_prompt_tokens),
                "inline_admission": rt.loop.policy.admission.inline if rt.loop else False,
                "capacities": [h.capacity for h in rt.parts.handles] if rt.parts else [],
                "engine": rt.engine.name, "model": served_model, "policy": rt.loop.knobs.policy if rt.loop else None,
                "knobs": rt.loop.knobs.as_dict() if rt.loop else None}

    @app.get("/v1/knobs", responses=ERRORS)
    async def knobs_get() -> dict[str, Any]:
        """The deployment's knobs record (version, values, deployment) and the version the loop runs."""
        return await knobs_view(await store_call(lambda s: s.knobs_get()))

    @app.put("/v1/knobs", responses={**ERRORS, 409: {"model": ErrorResponse,
                                                      "description": "expected_version is no longer current"},
                                      401: {"model": ErrorResponse, "description": "the server has an admin token "
                                            "and Authorization: Bearer does not carry it"}},
             dependencies=[Depends(admin_guard(admin_token))])
    async def knobs_put(body: KnobsUpdate) -> dict[str, Any]:
        """Change knobs: validated against the running deployment (every bad knob named, nothing written),
        versioned with history; the loop applies them at its next wave boundary. With an admin token
        (``WAVEPP_ADMIN_TOKEN``) only with ``Authorization: Bearer <token>``."""
        try:
            changes = body.changes.model_dump(exclude_none=True)   # type: ignore[attr-defined]
            record = await store_call(lambda s: s.knobs_set(changes, body.expected_version, rt.deployment,
                                                            validate=validated_values))
        except KnobError as exc:
            raise ApiError(422, str(exc), exc.field) from None
        return await knobs_view(record)

    async def store_call(op: Callable[[Any], Awaitable[Any]]) -> Any:
        if rt.store is None:
            raise ApiError(503, "the runtime is starting", None, "service_unavailable")
        try:
            return await asyncio.wait_for(op(rt.store), 10)
        except StoreError as exc:
            message = str(exc)
            if "version" in message:        # expected_version no longer current
                raise ApiError(409, message, "expected_version", "conflict") from None
            raise ApiError(503, f"store: {message}", None, "service_unavailable") from None
        except TimeoutError:
            raise ApiError(503, "the store did not answer within 10 s", None, "service_unavailable") from None

    async def knobs_view(record: Any) -> dict[str, Any]:
        watcher = rt.loop.knob_watcher if rt.loop else None
        return {"version": record.version, "knobs": record.values_or(Knobs().as_dict()),
                "deployment": record.deployment.as_dict() if record.deployment else None,
                "running_version": watcher.version if watcher else None,
                "refused": watcher.refused if watcher else None, "note": record.note}

    return app


def _field_of(loc: Sequence[Any]) -> str:
    """The request field a validation error is about: ``token_ids`` for ``("body", "token_ids", 3)``,
    the knob for ``("body", "changes", "ring")``, ``body`` for the body as a whole."""
    names = [p for p in loc if isinstance(p, str) and p != "body"]
    if len(names) > 1 and names[0] == "changes":
        return str(names[1])
    return str(names[0]) if names else "body"


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
    completion_tokens = max_tokens * len(results)
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


def queue_full_message(queued: int, max_queue: int, num_prompts: int = 1) -> str:
    """A 429's message: the requests waiting now and the limit (a request of ``num_prompts`` needs
    that many places in the queue)."""
    waiting = f"{queued} request{'' if queued == 1 else 's'} waiting (--max-queue {max_queue})"
    if num_prompts == 1:
        return f"the admission queue is full: {waiting}"
    return f"the admission queue has no room for {num_prompts} prompts: {waiting}"


PREFILL_PATHS = ("/v1/prefill", "/v1/completions")


class AdmissionGate:
    """ASGI middleware: while the admission queue is full (429) or the server drains or stopped (503),
    a prefill request is refused before its body is read or validated, so refusing costs next to
    nothing however fast clients send. The handler checks again (a body may hold several prompts)."""

    def __init__(self, app: Any, rt: ServerRuntime) -> None:
        self.app = app
        self.rt = rt

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        rt = self.rt
        if scope["type"] != "http" or scope["method"] != "POST" or scope["path"] not in PREFILL_PATHS \
                or rt.can_accept():
            await self.app(scope, receive, send)
            return
        if not rt.serving or rt.draining:
            status, retry = 503, "5"
            message = ("the server is draining (shutting down)" if rt.draining
                       else f"the runtime is not serving: {rt.error or 'starting'}")
            kind = "service_unavailable"
        else:
            status, retry = 429, str(rt.retry_after_s())
            message = queue_full_message(rt.source.queued, rt.source.max_queue)
            kind = "rate_limit_exceeded"
        body = json.dumps(error_body(status, message, None, kind)).encode()
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                                (b"retry-after", retry.encode())]})
        await send({"type": "http.response.body", "body": body})


class BodyLimit:
    """ASGI middleware: a body past ``max_bytes`` (declared or streamed) is answered 413 naming ``body``."""

    def __init__(self, app: Any, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > self.max_bytes):
            await self._refuse(send, "a content-length that is not a size" if not declared.isdigit() else
                               f"the body of {int(declared)} bytes is larger than the limit ({self.max_bytes})")
            return
        seen = 0
        started = refused = False

        async def counted() -> dict[str, Any]:
            nonlocal seen, refused
            message: dict[str, Any] = await receive()
            if message["type"] == "http.request" and not refused:
                seen += len(message.get("body", b""))
                if seen > self.max_bytes:       # a streamed body past the limit: answer now, stop reading
                    refused = True
                    if not started:
                        await self._refuse(send, f"the body is larger than the limit ({self.max_bytes} bytes)")
                    return {"type": "http.disconnect"}
            return message

        async def tracked(message: dict[str, Any]) -> None:
            nonlocal started
            if refused:
                return                           # the 413 is the answer
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, counted, tracked)
        except Exception:
            if not refused:
                raise

    @staticmethod
    async def _refuse(send: Any, message: str) -> None:
        body = json.dumps(error_body(413, message, "body", "invalid_request_error")).encode()
        await send({"type": "http.response.start", "status": 413,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})
