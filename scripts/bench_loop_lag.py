"""How late the embedded sim demo's runtime loop runs (``wavepp dashboard --engine sim``'s runtime:
llama-3-8b, H200, PP4, reuse90, c = 64, in real time), and its full garbage collections: a 5 ms
ticker on the runtime's own loop records how late each tick wakes. The figures in
``runtime/process_gc.py``'s docstring.

    .venv/bin/python scripts/bench_loop_lag.py [--seconds 150] [--as-started]

``--as-started``: tune the collector as ``wavepp dashboard`` tunes the runtime's process
(:func:`runtime.process_gc.collect_as_long_running`); without it, CPython's defaults.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import time
from typing import Any

from wavepp.dashboard.embedded import EmbeddedRuntime
from wavepp.runtime.engines.build import build_engine
from wavepp.runtime.engines.config import SimConfig
from wavepp.runtime.process_gc import collect_as_long_running

TICK_S = 0.005


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=150.0)
    parser.add_argument("--as-started", action="store_true", help="the collector tuned as the dashboard tunes it")
    args = parser.parse_args()
    full: list[float] = []
    began: list[float] = [0.0]

    def on_collect(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            began[0] = time.perf_counter()
        elif info["generation"] == 2:
            full.append(time.perf_counter() - began[0])

    gc.callbacks.append(on_collect)
    engine = build_engine(SimConfig("llama-3-8b", "h200", 4, clock="wall"))
    if args.as_started:
        collect_as_long_running()
    started = len(full)
    rt = EmbeddedRuntime(engine, workload="reuse90", concurrency=64, prompt_tokens=8192,
                         knobs=engine.default_knobs()).start()
    late: list[tuple[float, float]] = []

    async def ticker() -> None:
        while True:
            at = time.perf_counter()
            await asyncio.sleep(TICK_S)
            now = time.perf_counter()
            late.append((now, now - at - TICK_S))

    assert rt._aio is not None
    asyncio.run_coroutine_threadsafe(ticker(), rt._aio)
    time.sleep(args.seconds)
    ordered = sorted(x for _, x in late)
    after_first_minute = sorted(x for t, x in late if t > late[0][0] + 60)[-5:]
    print(f"{len(late):,} ticks: late p50 {ordered[len(ordered) // 2] * 1000:.1f} ms, "
          f"p99 {ordered[int(len(ordered) * 0.99)] * 1000:.1f} ms, max {ordered[-1] * 1000:.0f} ms; "
          f"the five latest after the first minute {[round(x * 1000) for x in after_first_minute]} ms")
    print(f"full collections while running: {len(full) - started} "
          f"({[round(x * 1000) for x in full[started:]]} ms); spans {rt.ring.read(10**18)[1]:,}")


if __name__ == "__main__":
    main()
