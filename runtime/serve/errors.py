"""The API's one error shape, OpenAI's: ``{"error": {"message", "type", "param", "code"}}``, where
``param`` names the field at fault (``token_ids``, ``max_tokens``, ``body``).

:class:`ApiError` is what a route raises; :func:`add_exception_handlers` puts FastAPI's own
refusals (404, 405, a body it cannot decode, a validation error) in the same shape; the ASGI
middlewares write it themselves (:func:`error_body`)."""

# No `from __future__ import annotations`: pydantic and FastAPI read these annotations at run time.

from collections.abc import Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from starlette.exceptions import HTTPException as StarletteHTTPException

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


#: the error answers every prefill and knob route documents in the schema
ERRORS: dict[int | str, dict[str, Any]] = {
    code: {"model": ErrorResponse, "description": why} for code, why in (
        (413, "the request body is larger than --max-body-bytes"),
        (415, "the body is not sent as JSON (Content-Type: application/json)"),
        (422, "a field is malformed or out of range (param names it)"),
        (429, "the admission queue is full: retry after Retry-After seconds"),
        (500, "the runtime failed the request"),
        (503, "draining (SIGTERM), starting, or the runtime stopped"))}


def queue_full_message(queued: int, max_queue: int, num_prompts: int = 1) -> str:
    """A 429's message: the requests waiting now and the limit (a request of ``num_prompts`` needs
    that many places in the queue)."""
    waiting = f"{queued} request{'' if queued == 1 else 's'} waiting (--max-queue {max_queue})"
    if num_prompts == 1:
        return f"the admission queue is full: {waiting}"
    return f"the admission queue has no room for {num_prompts} prompts: {waiting}"


def add_exception_handlers(app: FastAPI) -> None:
    """:class:`ApiError`, and FastAPI's own refusals, answered in the one shape."""

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
        media = request.headers.get("content-type", "").split(";")[0].strip().lower()
        # A body sent without a JSON media type is not read as JSON at all: 415, not the body's 422
        # (a request with no body and no media type is told the field it lacks).
        sent = request.headers.get("content-length", "0") != "0" or "transfer-encoding" in request.headers
        if (media or sent) and media != "application/json" and not media.endswith("+json"):
            message = f"body: send JSON with Content-Type: application/json (got {repr(media) if media else 'none'})"
            return JSONResponse(error_body(415, message, "body", "invalid_request_error"), 415)
        problems = [(_field_of(e.get("loc", ())), _where(e.get("loc", ())),
                     str(e.get("msg", "invalid")).removeprefix("Value error, "))
                    for e in exc.errors()[:MAX_PROBLEMS]]
        problems = problems or [("body", "body", "invalid request")]
        message = "; ".join(f"{where}: {msg}" for _, where, msg in problems)
        return JSONResponse(error_body(422, message, problems[0][0], "invalid_request_error"), 422)


_SOURCES = ("body", "query", "path", "header", "cookie")     # where FastAPI found a field, not its name


def _name(name: Any, limit: int = 60) -> str:
    """A field's name as a message shows it: cut to ``limit`` characters with its length named (a
    client may send a key of any length)."""
    text = str(name)
    return text if len(text) <= limit else f"{text[:40]}… ({len(text)} characters)"


def _where(loc: Sequence[Any]) -> str:
    """The field and the item at fault, as a message names them: ``token_ids[3]`` for
    ``("body", "token_ids", 3)``; a name another client made up is echoed bounded."""
    names = list(loc[1:]) if loc and loc[0] in _SOURCES else list(loc)
    if len(names) > 1 and names[0] == "changes":
        names = names[1:]
    head = _name(names[0]) if names else (str(loc[0]) if loc else "body")
    return head + "".join(f"[{p}]" for p in names[1:] if isinstance(p, int))


def _field_of(loc: Sequence[Any]) -> str:
    """The request field a validation error is about: ``token_ids`` for ``("body", "token_ids", 3)``,
    the knob for ``("body", "changes", "ring")``, ``body`` for the body as a whole."""
    names = [p for p in (loc[1:] if loc and loc[0] in _SOURCES else loc) if isinstance(p, str)]
    if len(names) > 1 and names[0] == "changes":
        return _name(names[1])
    return _name(names[0]) if names else "body"
