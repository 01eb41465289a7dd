"""The admission gate answers a prefill request before its body is read while the server cannot take
it: 429 with Retry-After when the queue is full, 503 while draining; other requests pass."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import httpx

from wavepp.runtime.serve.middleware import AdmissionGate


def test_the_gate_refuses_before_reading_the_body() -> None:
    reached: list[str] = []

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        reached.append(scope["path"])
        await receive()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    rt = SimpleNamespace(serving=True, draining=False, error=None, accept=False,
                         source=SimpleNamespace(max_queue=7, queued=7), retry_after_s=lambda: 3)
    rt.can_accept = lambda: rt.accept and not rt.draining

    async def main() -> None:
        transport = httpx.ASGITransport(app=AdmissionGate(app, rt))  # type: ignore[arg-type]
        async with httpx.AsyncClient(transport=transport, base_url="http://gate") as client:
            full = await client.post("/v1/prefill", content=b"not even json")
            assert full.status_code == 429 and full.headers["retry-after"] == "3"
            assert full.json()["error"]["type"] == "rate_limit_exceeded"
            assert "7 requests waiting (--max-queue 7)" in full.text      # the true number, and the limit
            assert (await client.post("/v1/completions", content=b"{}")).status_code == 429
            assert (await client.get("/v1/state")).status_code == 200       # not a prefill: passes
            rt.draining = True
            draining = await client.post("/v1/prefill", content=b"{}")
            assert draining.status_code == 503 and "draining" in draining.json()["error"]["message"]
            rt.draining, rt.accept = False, True
            assert (await client.post("/v1/prefill", content=b"{}")).status_code == 200
        assert reached == ["/v1/state", "/v1/prefill"]

    asyncio.run(main())
