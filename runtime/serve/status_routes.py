"""What the server says about itself, all reads: ``/v1/models``, liveness (``/health``) and
readiness (``/ready``), Prometheus ``/metrics``, ``/v1/state`` and the finished spans ``/v1/spans``
(what ``wavepp bench --url`` computes its figures from)."""

# No `from __future__ import annotations`: FastAPI reads the handlers' annotations at run time.

from typing import Annotated, Any

from fastapi import FastAPI
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from pydantic import Field

from wavepp.runtime.serve.runtime import ServerRuntime


def add_status_routes(app: FastAPI, rt: ServerRuntime, served_model: str, tokenizer: Any = None) -> None:
    block_size = rt.engine.block_size
    vocab = rt.engine.vocab_size

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        """The served model, its prompt limit and its tokenizer (``path``; the built-in one's ``name``
        and the ``hf_home`` a client loads it from by that name), or null without one."""
        return {"object": "list", "data": [{"id": served_model, "object": "model", "created": int(rt.started_at),
                                            "owned_by": "wavepp", "max_model_len": rt.max_prompt_tokens,
                                            "tokenizer": getattr(tokenizer, "about", None)}]}

    @app.get("/health", responses={503: {"description": "the pipeline loop failed (the server is exiting)"}})
    async def health() -> JSONResponse:
        """Liveness: the process answers and its pipeline loop has not failed (a failed server exits
        within a second; until then this says why)."""
        if rt.error is not None:
            return JSONResponse({"status": "failed", "error": rt.error}, 503)
        return JSONResponse({"status": "ok"})

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
                "capacities": [h.capacity for h in rt.parts.handles] if rt.parts else [],
                "engine": rt.engine.name, "model": served_model, "policy": rt.loop.knobs.policy if rt.loop else None,
                "knobs": rt.loop.knobs.as_dict() if rt.loop else None}
