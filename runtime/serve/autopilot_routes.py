"""The autopilot's settings: ``GET /v1/autopilot`` (its record in the store: mode, bounds, frozen, and the
last decision of this server's autopilot) and ``PUT /v1/autopilot`` (changes to the record - switch it off,
resume it after an operator's knob write froze it, move its bounds - checked by the same rules as the
record's every reader, :func:`runtime.autopilot.settings.from_dict`). The running autopilot reads the record
at its next window. With an admin token a write needs it (:class:`runtime.serve.middleware.AdminGate`)."""

# No `from __future__ import annotations`: FastAPI reads the handlers' annotations at run time.

import asyncio
from typing import Annotated, Any, Literal

from fastapi import FastAPI
from pydantic import BaseModel, ConfigDict, Field

from wavepp.runtime.autopilot.settings import AutopilotSettings, SettingsError, from_dict
from wavepp.runtime.serve.errors import ERRORS, ApiError, ErrorResponse
from wavepp.runtime.serve.runtime import ServerRuntime
from wavepp.store.base import StoreError

Bound = Annotated[list[int], Field(min_length=2, max_length=2, description="[lowest, highest]")]


class AutopilotChanges(BaseModel):
    """The fields to change; the record's own rules (a bound within its knob's range, ...) answer 422."""
    model_config = ConfigDict(extra="forbid", strict=True)      # true is not a number of seconds
    mode: Literal["off", "advise", "on"] | None = None
    bounds: dict[Literal["max_wave_tokens", "min_wave_tokens", "ring", "fill_factor", "max_leases",
                         "max_round_requests", "static_chunk_tokens", "snapshot_interval"], Bound] | None = None
    allow_policy: bool | None = None
    frozen: bool | None = None
    frozen_why: Annotated[str, Field(max_length=300)] | None = None
    window_s: Annotated[float, Field(gt=0)] | None = None
    margin: Annotated[float, Field(ge=0, lt=1)] | None = None
    cooldown: Annotated[int, Field(ge=0, le=1000)] | None = None
    search_s: Annotated[float, Field(gt=0)] | None = None


class AutopilotUpdate(BaseModel):
    model_config = ConfigDict(extra="forbid")
    changes: AutopilotChanges


def add_autopilot_routes(app: FastAPI, rt: ServerRuntime) -> None:

    @app.get("/v1/autopilot", responses=ERRORS)
    async def autopilot_get() -> dict[str, Any]:
        """The autopilot's settings (its record in the store; the defaults, mode off, when none is kept) and
        this server's autopilot's last decision (null: none running, or no window ended yet)."""
        return view(await current())

    @app.put("/v1/autopilot", responses={**ERRORS, 401: {"model": ErrorResponse, "description": "the server has "
                                         "an admin token and Authorization: Bearer does not carry it"}})
    async def autopilot_put(body: AutopilotUpdate) -> dict[str, Any]:
        """Change the autopilot's settings (``{"changes": {"frozen": false}}`` resumes it; ``"mode": "off"``
        stops it); every bad field is named (422) and nothing is written. With an admin token
        (``WAVEPP_ADMIN_TOKEN``) only with ``Authorization: Bearer <token>``."""
        try:
            settings = from_dict(body.changes.model_dump(exclude_none=True), await current())
        except SettingsError as exc:
            raise ApiError(422, str(exc), "changes") from None
        await call(lambda: rt.store.autopilot_put(settings.as_dict()))   # type: ignore[union-attr]
        return view(settings)

    async def current() -> AutopilotSettings:
        raw = await call(lambda: rt.store.autopilot_get())                # type: ignore[union-attr]
        try:
            return from_dict(raw or {})
        except SettingsError:
            return AutopilotSettings()          # a foreign writer's record: shown as the defaults, rewritten on PUT

    async def call(op: Any) -> Any:
        if rt.store is None:
            raise ApiError(503, "the runtime is starting", None, "service_unavailable")
        try:
            return await asyncio.wait_for(op(), 10)
        except StoreError as exc:
            raise ApiError(503, f"store: {exc}", None, "service_unavailable") from None
        except TimeoutError:
            raise ApiError(503, "the store did not answer within 10 s", None, "service_unavailable") from None

    def view(settings: AutopilotSettings) -> dict[str, Any]:
        decisions = rt.autopilot.decisions if rt.autopilot is not None else []
        return {"settings": settings.as_dict(), "running": rt.autopilot is not None,
                "last_decision": decisions[-1] if decisions else None}
