"""Small sim runs with a chosen telemetry configuration, for the telemetry tests."""

from __future__ import annotations

from wavepp.runtime.bench.runs import BenchConfig, RunRecord, run_one
from wavepp.runtime.engines.config import SimConfig
from wavepp.runtime.engines.sim.engine import SimEngine
from wavepp.runtime.sources.workloads import parse_workload
from wavepp.telemetry.config import TelemetryConfig
from wavepp.telemetry.metrics import WaveppMetrics
from wavepp.telemetry.setup import configure


def small_run(cfg: TelemetryConfig, metrics: WaveppMetrics | None = None, requests: int = 24,
              policy: str = "wavepp", realtime: bool = False, pp: int = 2) -> RunRecord:
    """``llama-3-8b`` on the sim, PP2, ``reuse90`` at concurrency 4 (virtual time unless ``realtime``)."""
    configure(cfg)
    engine = SimEngine(SimConfig("llama-3-8b", "h200", pp, kv_blocks=[2000], clock="wall" if realtime else "virtual",
                       time_scale=0.05 if realtime else 1.0))
    bench = BenchConfig(parse_workload("reuse90"), [4], [policy], requests, prompt_tokens=2048, metrics=metrics,
                        telemetry=[cfg.mode])
    try:
        return run_one(engine, bench, policy, 4, telemetry=cfg.mode)
    finally:
        engine.close()
        configure(None)
