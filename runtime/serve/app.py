"""The HTTP API of ``wavepp serve`` (FastAPI; its OpenAPI schema at ``/openapi.json``).

Every error is one JSON shape, OpenAI's: ``{"error": {"message", "type", "param", "code"}}`` -
``param`` names the field at fault (``token_ids``, ``max_tokens``, ``body``). Backpressure:
``429`` with ``Retry-After`` when the admission queue is full, ``503`` while draining or when the
runtime stopped, ``413`` for a body past ``--max-body-bytes``, ``422`` for a prompt that is too
long or malformed, or for more prompts in one request than the queue ever holds. A client that
disconnects before its answer cancels its request. With an admin token (``WAVEPP_ADMIN_TOKEN``) a
knob write without it is ``401`` (:func:`runtime.serve.knob_routes.admin_guard`).

The parts, one concern each: the error shape and FastAPI's refusals in it (:mod:`.errors`), the
request and response bodies (:mod:`.models`), the prefill routes (:mod:`.prefill_routes`), the
server's reads of itself (:mod:`.status_routes`), the knobs (:mod:`.knob_routes`); the ASGI
middlewares that refuse before a body is read are :mod:`.middleware`.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI

from wavepp.runtime.serve.errors import add_exception_handlers
from wavepp.runtime.serve.knob_routes import add_knob_routes
from wavepp.runtime.serve.models import request_models
from wavepp.runtime.serve.prefill_routes import add_prefill_routes
from wavepp.runtime.serve.runtime import ServerRuntime
from wavepp.runtime.serve.status_routes import add_status_routes


def create_app(rt: ServerRuntime, served_model: str, tokenizer: Any = None, admin_token: str | None = None) -> FastAPI:
    """The API over one :class:`ServerRuntime` (started and stopped by the caller); ``admin_token``:
    what knob writes need (:func:`runtime.serve.knob_routes.admin_guard`)."""
    models = request_models(rt.engine.vocab_size, rt.max_prompt_tokens, rt.engine.block_size, tokenizer)
    app = FastAPI(title="WavePP prefill server", version="1",
                  description="Pipeline-parallel prefill: first token, reuse and the KV handle of each prompt.")
    add_exception_handlers(app)
    # In this order: the schema lists the paths as they were added.
    add_prefill_routes(app, rt, models, served_model, tokenizer)
    add_status_routes(app, rt, served_model)
    add_knob_routes(app, rt, models.knobs_update, admin_token)
    return app
