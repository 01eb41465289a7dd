"""ASGI middlewares around the API (``wavepp serve`` wraps the app in them, :mod:`runtime.serve.main`):
refusals that must cost next to nothing, answered before FastAPI reads or validates a body."""

from __future__ import annotations

import hmac
import json
from typing import Any

from wavepp.runtime.serve.errors import error_body, queue_full_message
from wavepp.runtime.serve.runtime import ServerRuntime

PREFILL_PATHS = ("/v1/prefill", "/v1/completions", "/v1/chat/completions")
ADMIN_ROUTES = {("PUT", "/v1/knobs"), ("PUT", "/v1/autopilot")}   # routes that change the server: the admin token


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
        """413, and the connection closed after it: the rest of the body was never read, so the
        connection cannot carry another request (kept alive, it waited for bytes that never come)."""
        body = json.dumps(error_body(413, message, "body", "invalid_request_error")).encode()
        await send({"type": "http.response.start", "status": 413,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                                (b"connection", b"close")]})
        await send({"type": "http.response.body", "body": body})


class AdminGate:
    """ASGI middleware: with an admin ``token``, a request to :data:`ADMIN_ROUTES` must carry
    ``Authorization: Bearer <token>`` (compared in constant time); otherwise it is answered 401 with
    ``WWW-Authenticate`` (RFC 6750) before its body is read - a malformed body without the token
    learns nothing of the body's rules. Without a token anyone who reaches the port may write: the
    server listens on loopback by default."""

    def __init__(self, app: Any, token: str | None) -> None:
        self.app = app
        self.expected = token.encode() if token else None

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        refusal = None
        if self.expected is not None and scope["type"] == "http" and (scope["method"], scope["path"]) in ADMIN_ROUTES:
            refusal = self._refusal(dict(scope.get("headers") or []).get(b"authorization", b""))
        if refusal is None:
            await self.app(scope, receive, send)
            return
        message, challenge = refusal
        body = json.dumps(error_body(401, message, None, "authentication_error")).encode()
        await send({"type": "http.response.start", "status": 401,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                                (b"www-authenticate", challenge.encode())]})
        await send({"type": "http.response.body", "body": body})

    def _refusal(self, authorization: bytes) -> tuple[str, str] | None:
        """(message, WWW-Authenticate) of a request without the right token; None when it carries it."""
        assert self.expected is not None
        scheme, _, given = authorization.partition(b" ")
        if scheme.lower() != b"bearer" or not given.strip():
            return ("changing knobs needs the admin token: send Authorization: Bearer <token>",
                    'Bearer realm="wavepp"')
        if not hmac.compare_digest(given.strip(), self.expected):
            return "the admin token is wrong", 'Bearer realm="wavepp", error="invalid_token"'
        return None
