"""The pressure grid (``wavepp grid --grid pressure``): many distinct long contexts competing for
pools that diverge across stages - the regime WavePP exists for.

* ``docs`` workloads (:mod:`runtime.sources.workloads`): documents of mean 32K, 128K and 256K tokens (a
  model whose context cannot hold the mean is skipped), as many as make a working set of about
  0.5x and 3x the smallest stage's KV pool - the pool the deployment's memory holds
  (:mod:`runtime.engines.sim.capacity`) - each request one document plus a 4K-token question, the
  documents drawn with Zipf(1) popularity; ``requests = max(4c, 2N)`` (at most 2000), so most
  documents are drawn and the working set the run touches is near the target;
* the Mooncake-format traces of ``../shared/data/traces``, with every stage's pool sized to a third
  of the trace's working set (distinct 512-token blocks), so it does not fit;
* c = 32 and 128 for the documents, 32 for the traces; GLM-5.2 and MiniMax-M2.7 on B300, PP4.

Every policy of the grid runs every setting with the same seeded requests; the caches start cold.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from wavepp.runtime.bench.grid import DEFAULT_POLICIES, GridSpec, Setting

MODELS = ("glm-5.2", "minimax-m2.7")
MEANS = (32768, 131072, 262144)
WORKING_SETS = (0.5, 3.0)
CONCURRENCY = (32, 128)
TRACE_CONCURRENCY = (32,)
SUFFIX = 4096
MAX_REQUESTS = 2000
TRACE_FIT = 3.0            # a trace's working set over each stage's pool
POLICIES = DEFAULT_POLICIES
VARIANTS = ("wavepp+chunking=mpu", "wavepp+chunking=timed")


def trace_working_set(path: Path) -> int:
    """Distinct tokens of the trace's prefix blocks (512 tokens per hash id)."""
    ids: set[int] = set()
    for line in path.read_text().splitlines():
        if line.strip():
            ids.update(json.loads(line).get("hash_ids", ()))
    return 512 * len(ids)


def pressure_settings(hardware: str = "b300", pp: int = 4, block_size: int = 64, models: Sequence[str] = MODELS,
                      traces: Sequence[Path] = (), perf_dir: str | None = None) -> list[Setting]:
    from wavepp.runtime.engines.config import SimConfig
    from wavepp.runtime.engines.sim.engine import SimEngine
    from wavepp.runtime.sources.workloads import doc_length_bounds

    out: list[Setting] = []
    for model in models:
        engine = SimEngine(SimConfig(model, hardware, pp, block_size, perf_dir=perf_dir))
        pool = min(engine.capacities) * block_size              # tokens the smallest stage holds
        for mean in MEANS:
            if doc_length_bounds(mean, block_size)[1] + SUFFIX > engine.max_context:
                continue                                        # e.g. MiniMax-M2.7 (204,800) at 256K
            for ws in WORKING_SETS:
                docs = max(2, round(ws * pool / mean))
                for c in CONCURRENCY:
                    label = f"docs {mean // 1024}K ws {ws:g}x"
                    out.append(Setting(model, f"docs:{docs}:suffix={SUFFIX}", c,
                                       min(MAX_REQUESTS, max(4 * c, 2 * docs)), label=label, prompt_tokens=mean))
        for trace in traces:
            blocks = max(1, round(trace_working_set(trace) / TRACE_FIT / block_size))
            for c in TRACE_CONCURRENCY:
                out.append(Setting(model, f"trace:{trace}", c, None, (blocks,) * pp,
                                   label=f"trace {trace.stem} ws {TRACE_FIT:g}x"))
    return out


def pressure_spec(hardware: str = "b300", pp: int = 4, models: Sequence[str] = MODELS,
                  traces: Sequence[Path] = (), policies: Sequence[str] = POLICIES,
                  variants: Sequence[str] = VARIANTS, seed: int = 0, perf_dir: str | None = None,
                  host_scale: float = 1.0) -> GridSpec:
    settings = pressure_settings(hardware, pp, models=models, traces=traces, perf_dir=perf_dir)
    return GridSpec(models=tuple(models), hardware=hardware, pp=pp, policies=tuple(policies), seed=seed,
                    perf_dir=perf_dir, host_scale=host_scale, variants=tuple(variants), explicit=settings,
                    name="pressure")
