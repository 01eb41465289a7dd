"""The HTTP API of a started :class:`ServerRuntime` in process: an httpx client over ASGI, the runtime
stopped after."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx

from wavepp.runtime.engines.sim.engine import SimEngine
from wavepp.runtime.serve.app import create_app
from wavepp.runtime.serve.runtime import ServerRuntime


@asynccontextmanager
async def api_on(engine: SimEngine) -> AsyncIterator[tuple[httpx.AsyncClient, ServerRuntime]]:
    rt = ServerRuntime(engine, engine.default_knobs(), max_queue=16)
    await rt.start()
    try:
        transport = httpx.ASGITransport(app=create_app(rt, "sim"))
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as api:
            yield api, rt
    finally:
        await rt.stop()
