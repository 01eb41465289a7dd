"""The knobs: ``GET /v1/knobs`` (the deployment's record and the version the loop runs) and
``PUT /v1/knobs`` (validated against the running deployment, versioned; applied by the loop at its
next wave boundary). With an admin token (``WAVEPP_ADMIN_TOKEN``) a write without it is ``401``
before its body is read (:class:`runtime.serve.middleware.AdminGate`)."""

# No `from __future__ import annotations`: FastAPI reads the handlers' annotations at run time.

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import FastAPI

from wavepp.runtime.control.knobs import KnobError, Knobs, validated_values
from wavepp.runtime.serve.errors import ERRORS, ApiError, ErrorResponse
from wavepp.runtime.serve.runtime import ServerRuntime
from wavepp.store.base import StoreError


def add_knob_routes(app: FastAPI, rt: ServerRuntime, KnobsUpdate: Any) -> None:
    """``KnobsUpdate``: the PUT body of this server (:func:`runtime.serve.models.request_models`)."""

    @app.get("/v1/knobs", responses=ERRORS)
    async def knobs_get() -> dict[str, Any]:
        """The deployment's knobs record (version, values, deployment) and the version the loop runs."""
        return await knobs_view(await store_call(lambda s: s.knobs_get()))

    @app.put("/v1/knobs", responses={**ERRORS, 409: {"model": ErrorResponse,
                                                      "description": "expected_version is no longer current"},
                                      401: {"model": ErrorResponse, "description": "the server has an admin token "
                                            "and Authorization: Bearer does not carry it"}})
    async def knobs_put(body: KnobsUpdate) -> dict[str, Any]:
        """Change knobs: validated against the running deployment (every bad knob named, nothing written),
        versioned with history; the loop applies them at its next wave boundary. With an admin token
        (``WAVEPP_ADMIN_TOKEN``) only with ``Authorization: Bearer <token>``."""
        try:
            changes = body.changes
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
