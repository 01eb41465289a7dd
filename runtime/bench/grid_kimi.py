"""The Kimi-K3 grid (``wavepp grid --grid kimi-k3``): one HGX B300 node serving Kimi-K3 - as a 4-stage
pipeline of 2 GPUs a stage (WavePP and the PP loops of TensorRT-LLM, SGLang and vLLM) or as one
tensor/expert-parallel group of all 8 (the three engines' TEP deployments) - on four workloads at
concurrency 1 to 64: 28 settings, 16 of them at c >= 8. The published study's exact 28 are not public.

* ``cold``: distinct prompts of 32K tokens (the engine's typical prompt for the big profiles);
* ``reuse90``: short contexts, 8K-token prompts 90% of which is an already seen prefix;
* long-context documents: ``docs`` of mean 128K tokens (16K-256K, :mod:`runtime.sources.workloads`) plus a 4K-token
  question, Zipf(1) popularity, as many as make half the PP deployment's smallest stage pool (the TEP group
  replicates the MLA latent on all 8 ranks, so there it is about 1.7x its pool: a property of TP, kept);
* ``sessions:32``: 32 multi-turn conversations of 16K-token turns, each prompt its whole history.

Every policy runs each setting with the same seeded requests and arrivals; the caches start cold; a hybrid
stage keeps a state snapshot every 16K tokens (the engine's default; the ablation sweeps it).
"""

from __future__ import annotations

from wavepp.runtime.bench.grid import GridSpec, Setting

MODEL = "kimi-k3"
CONCURRENCY = (1, 2, 4, 8, 16, 32, 64)
POLICIES = ("wavepp", "trtllm-pp", "sglang-pp", "vllm-pp", "trtllm-tep", "sglang-tep", "vllm-tep")
DOC_MEAN, DOC_FILL, SUFFIX = 131072, 0.5, 4096
MIN_REQUESTS = 32


def kimi_settings(hardware: str = "b300", pp: int = 4, block_size: int = 64,
                  perf_dir: str | None = None) -> list[Setting]:
    from wavepp.runtime.engines.config import SimConfig
    from wavepp.runtime.engines.sim.engine import SimEngine

    engine = SimEngine(SimConfig(MODEL, hardware, pp, block_size, perf_dir=perf_dir))
    docs = max(2, round(DOC_FILL * min(engine.capacities) * block_size / DOC_MEAN))
    workloads = (("cold", "cold", None), ("reuse90", "reuse90 8K", 8192),
                 (f"docs:{docs}:suffix={SUFFIX}", f"docs {DOC_MEAN // 1024}K", DOC_MEAN),
                 ("sessions:32", "sessions 16K", 16384))
    return [Setting(MODEL, w, c, max(MIN_REQUESTS, 4 * c), label=label, prompt_tokens=tokens)
            for w, label, tokens in workloads for c in CONCURRENCY]


def kimi_spec(hardware: str = "b300", pp: int = 4, policies: tuple[str, ...] = POLICIES, seed: int = 0,
              perf_dir: str | None = None, host_scale: float = 1.0) -> GridSpec:
    return GridSpec(models=(MODEL,), hardware=hardware, pp=pp, policies=policies, seed=seed, perf_dir=perf_dir,
                    host_scale=host_scale, explicit=kimi_settings(hardware, pp, perf_dir=perf_dir), name="kimi-k3")
