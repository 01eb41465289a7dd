"""The HTTP API of ``wavepp serve`` (FastAPI; its OpenAPI schema at ``/openapi.json``).

Every error is one JSON shape, OpenAI's: ``{"error": {"message", "type", "param", "code"}}`` -
``param`` names the field at fault (``token_ids``, ``max_tokens``, ``body``). Backpressure:
``429`` with ``Retry-After`` when the admission queue is full, ``503`` while draining or when the
runtime stopped, ``413`` for a body past ``--max-body-bytes``, ``422`` for a prompt that is too
long or malformed, or for more prompts in one request than the queue ever holds. A client that
disconnects before its answer cancels its request. With an admin token (``WAVEPP_ADMIN_TOKEN``) a
knob write without it is ``401`` (:class:`runtime.serve.middleware.AdminGate`).

The parts, one concern each: the error shape and FastAPI's refusals in it (:mod:`.errors`), the
request and response bodies (:mod:`.models`), the prefill routes (:mod:`.prefill_routes`) and chat
completions on them (:mod:`.chat_routes`), the
server's reads of itself (:mod:`.status_routes`), the knobs (:mod:`.knob_routes`); the ASGI
middlewares that refuse before a body is read are :mod:`.middleware`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import fastapi_offline
from fastapi import FastAPI
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

from wavepp.runtime.serve.autopilot_routes import add_autopilot_routes
from wavepp.runtime.serve.chat_routes import add_chat_routes
from wavepp.runtime.serve.errors import add_exception_handlers
from wavepp.runtime.serve.knob_routes import add_knob_routes
from wavepp.runtime.serve.middleware import AdminGate
from wavepp.runtime.serve.models import request_models
from wavepp.runtime.serve.prefill_routes import add_prefill_routes
from wavepp.runtime.serve.runtime import ServerRuntime
from wavepp.runtime.serve.status_routes import add_status_routes


def create_app(rt: ServerRuntime, served_model: str, tokenizer: Any = None, admin_token: str | None = None) -> FastAPI:
    """The API over one :class:`ServerRuntime` (started and stopped by the caller); ``admin_token``:
    what knob writes need, checked before their body is read (:class:`runtime.serve.middleware.AdminGate`)."""
    models = request_models(rt.engine.vocab_size, rt.max_prompt_tokens, rt.engine.block_size, tokenizer)
    app = FastAPI(title="WavePP prefill server", version="1", docs_url=None, redoc_url=None,
                  description="Pipeline-parallel prefill: first token, reuse and the KV handle of each prompt.")
    add_exception_handlers(app)
    add_docs(app)
    # In this order: the schema lists the paths as they were added.
    add_prefill_routes(app, rt, models, served_model, tokenizer)
    add_chat_routes(app, rt, served_model, tokenizer)
    add_status_routes(app, rt, served_model, tokenizer)
    add_knob_routes(app, rt, models.knobs_update)
    add_autopilot_routes(app, rt)
    app.add_middleware(AdminGate, token=admin_token)
    return app


DOCS_ASSETS = Path(fastapi_offline.__file__).parent / "static"   # Swagger UI 5 (OpenAPI 3.1), vendored


def add_docs(app: FastAPI) -> None:
    """``/docs``: Swagger UI from assets this server serves itself (``/docs/assets``), so it renders
    on a machine without internet (FastAPI's default loads it from a CDN: a blank page offline)."""
    app.mount("/docs/assets", StaticFiles(directory=DOCS_ASSETS), name="docs-assets")

    @app.get("/docs", include_in_schema=False)
    async def docs() -> HTMLResponse:
        return get_swagger_ui_html(openapi_url="/openapi.json", title=f"{app.title} - API",
                                   swagger_js_url="/docs/assets/swagger-ui-bundle.js",
                                   swagger_css_url="/docs/assets/swagger-ui.css",
                                   swagger_favicon_url="/docs/assets/favicon.png")
