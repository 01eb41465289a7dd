"""A live view on a store: it follows the newest run until the operator picks one, and a banner
says when the runtime behind it finished, failed or went silent, with its last status."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from streamlit.testing.v1 import AppTest

from wavepp.runtime.bench.runs import BenchConfig, RunRecord, run_one
from wavepp.runtime.engines.config import SimConfig
from wavepp.runtime.engines.sim.engine import SimEngine
from wavepp.runtime.sources.workloads import parse_workload

from .conftest import APP, redis_cluster  # type: ignore[import-not-found]


@pytest.fixture
def url(dashboard_env: None) -> Iterator[str]:
    with redis_cluster("live") as url:
        yield url


def bench_run(url: str, policy: str) -> RunRecord:
    engine = SimEngine(SimConfig("llama-3-8b", "h200", 2, kv_blocks=[2000], store_url=url))
    cfg = BenchConfig(parse_workload("reuse90"), [4], [policy], 8, prompt_tokens=2048)
    return run_one(engine, cfg, policy, 4)


def open_page(url: str, page: str) -> AppTest:
    os.environ["WAVEPP_DASHBOARD"] = f"store:{url}"
    at = AppTest.from_file(APP, default_timeout=60)
    at.session_state["page"] = page
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def shown_run(at: AppTest) -> str:
    return next(c.value for c in at.sidebar.caption if c.value.startswith("run: "))


def goto(at: AppTest, page: str) -> None:
    at.sidebar.radio[0].set_value(page).run()
    assert not at.exception, [e.value for e in at.exception]


def redrawn_until(at: AppTest, shown: str, within_s: float = 10.0) -> None:
    """Redraw the page until the sidebar shows run ``shown``: a page on the newest run draws what the
    source's follower last read, once a second."""
    deadline = time.monotonic() + within_s
    while shown not in shown_run(at) and time.monotonic() < deadline:
        time.sleep(0.3)
        at.run()
    assert shown in shown_run(at)


def test_a_live_view_stays_on_the_live_run_until_the_operator_picks_another(url: str) -> None:
    """Today: a second run appears, a page switch brings up a "Run" box set to the finished first run.
    Now the view follows the newest run; a run the operator picked stays picked."""
    first = bench_run(url, "trtllm-pp")
    at = open_page(url, "Pipeline")
    redrawn_until(at, first.run.id)
    second = bench_run(url, "wavepp")
    goto(at, "Admission")
    goto(at, "Pipeline")
    redrawn_until(at, second.run.id)
    box = at.sidebar.selectbox[0]
    assert box.value == "" and second.run.label in box.format_func("")       # "newest run (…)"

    box.set_value(first.run.id).run()                                        # the operator picks the old run
    assert first.run.id in shown_run(at)
    bench_run(url, "wavepp")                                                 # a third run starts
    goto(at, "Admission")
    goto(at, "Pipeline")
    assert first.run.id in shown_run(at)


def put_status(url: str, status: dict[str, Any]) -> None:
    client = redis.Redis.from_url(url.split("?")[0])
    cluster = url.split("cluster=")[1]
    client.set(f"wavepp:{{{cluster}}}:status", json.dumps(status))


@pytest.mark.parametrize("change, kind, words", [
    ({}, "info", "This run finished"),
    ({"state": "failed: StageDied: stage 1 exited with -9"}, "error", "The runtime stopped: failed: StageDied"),
    ({"state": "running", "wall": time.time() - 60}, "warning", "has not reported for"),
])
def test_a_banner_says_when_the_runtime_stopped(url: str, change: dict[str, Any], kind: str, words: str) -> None:
    """Today the only hint was a growing "newest span ended X s ago" caption."""
    rec = bench_run(url, "wavepp")
    last = rec.loop.status[-1]
    assert last.state == "finished" and last.run == rec.run.id
    put_status(url, {**last.to_json(), **change, "t": last.t + 1})
    at = open_page(url, "Cache")
    banners = [e.value for e in getattr(at, kind)]
    assert any(words in b and "last status at" in b and "requests finished" in b for b in banners), banners


def test_tables_are_recomputed_only_when_new_spans_arrive(url: str) -> None:
    """Today every refresh rebuilt every table from every span (62% of a core for one viewer of a
    finished run). Now a view is keyed on the stream position: the same position, the same tables."""
    from wavepp.dashboard.sources import StoreSource
    from wavepp.dashboard.view import ViewCache

    rec = bench_run(url, "wavepp")
    source, cache = StoreSource(url), ViewCache()
    first = cache.view(source, source.snapshot())
    again = cache.view(source, source.snapshot())
    assert again.frames is first.frames and again.figures is first.figures
    late = {**rec.encoded[-1], "id": "late", "t0": rec.encoded[-1]["t1"], "t1": rec.encoded[-1]["t1"] + 1000}
    redis.Redis.from_url(url.split("?")[0]).xadd(f"wavepp:{{{url.split('cluster=')[1]}}}:spans",
                                                 {"s": json.dumps(late)})
    moved = cache.view(source, source.snapshot())
    assert moved.frames is not first.frames and len(moved.snap.spans) == len(first.snap.spans) + 1
