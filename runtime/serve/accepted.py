"""When the server accepted an HTTP request, and the span that times it from there.

A client times a request from when it sends it; the pipeline loop times it from when it reaches the
loop, after the body was read, parsed and validated and the request waited for the event loop. So
the server's own time to first token starts where the client's does, give or take the network:
:class:`Accepted`, the outermost ASGI middleware, stamps each request with the runtime clock as it
enters the application, and :func:`http_span` records one ``wavepp.http.request`` span per prefill
request from that stamp to its answer, with ``gen_ai.server.time_to_first_token`` (the metrics turn it
into ``wavepp_time_to_first_token_seconds``)."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from wavepp.runtime.serve.runtime import ServerRuntime
from wavepp.telemetry import names as N

ACCEPTED = "wavepp.accepted"          # the ASGI scope's key: the runtime clock when the request came in


def clock() -> float:
    """The runtime clock of a real-time server: the event loop's, which is the monotonic clock."""
    return time.monotonic()


class Accepted:
    """ASGI middleware, outermost: stamps ``scope[ACCEPTED]`` with :func:`clock` before anything else
    runs (refusals, body limits, the body's read and validation all count toward the client's wait)."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            scope[ACCEPTED] = clock()
        await self.app(scope, receive, send)


def accepted_at(scope: Mapping[str, Any]) -> float:
    """When the request was accepted (now, for an app mounted without :class:`Accepted`)."""
    at = scope.get(ACCEPTED)
    return float(at) if at is not None else clock()


def http_span(rt: ServerRuntime, route: str, accepted: float, request_ids: Sequence[str], input_tokens: int,
              client_id: str | None, error: str | None = None) -> float | None:
    """Record the HTTP request's span, from ``accepted`` to now; its time to first token (returned)
    when it was answered, none when it failed with ``error``. ``client_id``: the client's
    ``X-Request-ID`` (aiperf sends one), so a client's record of the request finds the server's."""
    if rt.tel is None:
        return None
    ttft = clock() - accepted
    attrs: dict[str, Any] = {N.HTTP_ROUTE: route, N.HTTP_REQUEST_IDS: list(request_ids),
                             N.GEN_AI_INPUT_TOKENS: input_tokens}
    if client_id:
        attrs[N.HTTP_CLIENT_ID] = client_id[:128]
    if error is None:
        attrs[N.TTFT] = ttft
    rt.tel.end(rt.tel.start(N.HTTP_REQUEST, attrs, root=True, at=accepted), error)
    return ttft if error is None else None
