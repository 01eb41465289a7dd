"""A server's idle seconds by cause reach Prometheus while it runs (a server's run never ends, so
they cannot wait for the end as a bench's do)."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families


def idle_seconds(server: Any) -> dict[tuple[str, str], float]:
    r = server.client.get("/metrics")
    assert r.status_code == 200
    out: dict[tuple[str, str], float] = {}
    for family in text_string_to_metric_families(r.text):
        for s in family.samples:
            if s.name == "wavepp_stage_idle_seconds_total":
                out[s.labels["stage"], s.labels["cause"]] = s.value
    return out


def test_idle_seconds_by_cause_are_exported_while_the_server_runs(start_server: Callable[..., Any]) -> None:
    server = start_server("--engine", "sim", "--pp", "2", "--kv-blocks", "2000", "--time-scale", "5")

    def post(i: int) -> int:
        ids = [(i * 7919 + t * 31) % 32000 for t in range(1024)]
        return httpx.post(f"{server.url}/v1/prefill", json={"token_ids": ids}, timeout=120).status_code

    seen: list[dict[tuple[str, str], float]] = []
    for batch in range(3):                       # the server keeps running between scrapes
        with ThreadPoolExecutor(8) as pool:
            assert set(pool.map(post, range(batch * 16, batch * 16 + 16))) == {200}
        seen.append(idle_seconds(server))
    last = seen[-1]
    assert {stage for stage, _ in last} == {"0", "1"}, last          # every stage, before the run ends
    assert "drain" not in {cause for _, cause in last}             # a live stage may be computing
    for before, after in zip(seen, seen[1:], strict=False):        # counters only grow
        assert all(after.get(k, 0.0) >= v for k, v in before.items())
    assert sum(last.values()) > sum(seen[0].values())
    assert server.stop() == 0, server.errors()
