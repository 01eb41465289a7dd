"""Drive vLLM v1's own ``Scheduler`` and ``KVCacheManager`` on the oracle scenarios; record each step's decisions.

Runs in ``.venv-oracle`` (``make oracle``), with no GPU: the model output is faked, as vLLM's unit tests fake
it (``tests/v1/core/utils.py`` builds the scheduler from a ``VllmConfig`` and a ``KVCacheConfig`` of one full
attention group). The engine core's pipeline-parallel loop is replayed as ``EngineCore.step_with_batch_queue``
runs it (``vllm/v1/engine/core.py`` at 0.34.0): each call schedules one batch; the batch joins a queue of
``max_concurrent_batches`` (``pp_size``, or ``pp_size + 1`` with async scheduling: ``config/vllm.py``); only
when the queue is full, or nothing more can be scheduled, the oldest batch's output comes back
(``update_from_output``). A step is one ``schedule()`` call; requests of a scenario arrive before a step.

The fake output samples one token for a request whose prefill the batch completes, none for a partial chunk
(what the GPU model runner returns); every request asks for one token (``max_tokens=1``), so it finishes
when that output comes back.

Per step the fixture records the tokens scheduled per request and, for a request scheduled for the first
time, its hit (``NewRequestData.num_computed_tokens``: the prefix-cache hit ``Scheduler.schedule`` found
with ``get_computed_blocks`` while ``num_computed_tokens == 0``).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from collections import deque
from pathlib import Path
from typing import Any

os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402
import vllm  # noqa: E402
from scenarios import Arrivals, Scenario, load, write_fixture  # noqa: E402
from vllm.config import CacheConfig, DeviceConfig, ModelConfig, ParallelConfig, SchedulerConfig, VllmConfig  # noqa: E402
from vllm.sampling_params import SamplingParams  # noqa: E402
from vllm.utils.hashing import sha256  # noqa: E402
from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash  # noqa: E402
from vllm.v1.core.sched.scheduler import Scheduler  # noqa: E402
from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec  # noqa: E402
from vllm.v1.outputs import ModelRunnerOutput  # noqa: E402
from vllm.v1.request import Request  # noqa: E402
from vllm.v1.structured_output import StructuredOutputManager  # noqa: E402

MODEL_DIR = Path(__file__).resolve().parent / "model"
MAX_STEPS = 10_000
SAMPLED = 2          # the token every finishing prefill samples (any id: the request stops at max_tokens=1)

# (fixture name, scenario, settings). vLLM's defaults where not named: FCFS, prefix caching on, chunked
# prefill on; ``max_num_batched_tokens`` 16384 is its default on a GPU of 160 GiB or more
# (``EngineArgs.get_batch_defaults``), 8192 the budget DESIGN §3.2's reading names.
RUNS: list[tuple[str, str, dict[str, Any]]] = [
    ("vllm-one-document-8192", "one-document", {"max_num_batched_tokens": 8192}),
    ("vllm-one-document-8192-lpt4096", "one-document",
     {"max_num_batched_tokens": 8192, "long_prefill_token_threshold": 4096}),
    ("vllm-one-document-16384", "one-document", {"max_num_batched_tokens": 16384}),
    ("vllm-one-document-8192-async", "one-document", {"max_num_batched_tokens": 8192, "async_scheduling": True}),
    ("vllm-zipf-docs-16384", "zipf-docs", {"max_num_batched_tokens": 16384}),
    ("vllm-zipf-docs-8192", "zipf-docs", {"max_num_batched_tokens": 8192}),
    ("vllm-zipf-docs-8192-lpt4096", "zipf-docs",
     {"max_num_batched_tokens": 8192, "long_prefill_token_threshold": 4096}),
]
DEFAULTS: dict[str, Any] = {"max_num_batched_tokens": 8192, "long_prefill_token_threshold": 0, "block_size": 16,
                            "pipeline_parallel_size": 4, "async_scheduling": False, "max_num_seqs": 256,
                            "num_blocks": 40_000, "policy": "fcfs", "enable_prefix_caching": True}


def build_scheduler(s: dict[str, Any]) -> tuple[Scheduler, int]:
    """A scheduler as the engine core builds it, on a CPU; with its batch queue size."""
    model = ModelConfig(model=str(MODEL_DIR), tokenizer=str(MODEL_DIR), skip_tokenizer_init=True,
                        dtype="float16", seed=0, max_model_len=65536)
    sched = SchedulerConfig(max_num_seqs=s["max_num_seqs"], max_num_batched_tokens=s["max_num_batched_tokens"],
                            max_model_len=65536, is_encoder_decoder=False, enable_chunked_prefill=True,
                            long_prefill_token_threshold=s["long_prefill_token_threshold"], policy=s["policy"],
                            async_scheduling=s["async_scheduling"])
    cache = CacheConfig(block_size=s["block_size"], enable_prefix_caching=s["enable_prefix_caching"])
    parallel = ParallelConfig(pipeline_parallel_size=s["pipeline_parallel_size"])
    config = VllmConfig(model_config=model, scheduler_config=sched, cache_config=cache, parallel_config=parallel,
                        device_config=DeviceConfig(device="cpu"))
    cache.num_gpu_blocks = s["num_blocks"]
    kv = KVCacheConfig(num_blocks=s["num_blocks"], kv_cache_tensors=[], kv_cache_groups=[
        KVCacheGroupSpec(["layer"], FullAttentionSpec(block_size=s["block_size"], num_kv_heads=1, head_size=1,
                                                      dtype=torch.float32))])
    cls = config.scheduler_config.get_scheduler_cls()
    scheduler = cls(vllm_config=config, kv_cache_config=kv, block_size=s["block_size"], log_stats=True,
                    structured_output_manager=StructuredOutputManager(config))
    return scheduler, config.max_concurrent_batches


def run(scenario: Scenario, settings: dict[str, Any]) -> tuple[dict[str, Any], float]:
    """The fixture (decisions only: it is the same on every run) and the mean host ms of one schedule()."""
    s = DEFAULTS | settings
    scheduler, queue_size = build_scheduler(s)
    hasher = get_request_block_hasher(s["block_size"], sha256)
    params = SamplingParams(max_tokens=1, ignore_eos=True)
    arrivals = Arrivals(scenario)
    prompt_len: dict[str, int] = {}
    queue: deque[tuple[Any, set[str]]] = deque()
    steps: list[dict[str, Any]] = []
    first: dict[str, dict[str, int]] = {}
    finished_at: dict[str, int] = {}
    host_s: list[float] = []
    step = 0
    while len(finished_at) < len(scenario.requests):
        arrived = arrivals.due(step)
        for r in arrived:
            req = Request(r.id, r.tokens(), params, None, arrival_time=float(step), block_hasher=hasher)
            prompt_len[r.id] = req.num_prompt_tokens
            scheduler.add_request(req)
        model_executed = False
        if scheduler.has_requests():
            t0 = time.perf_counter()
            out = scheduler.schedule()
            host_s.append(time.perf_counter() - t0)
            completes = {rid for rid in out.num_scheduled_tokens
                         if scheduler.requests[rid].num_computed_tokens >= prompt_len[rid]}
            hits = {n.req_id: n.num_computed_tokens for n in out.scheduled_new_reqs}
            for rid, hit in hits.items():
                first.setdefault(rid, {"step": step, "hit": hit})
            steps.append({"step": step, "arrived": [r.id for r in arrived], "scheduled": dict(out.num_scheduled_tokens),
                          "first": hits})
            model_executed = out.total_num_scheduled_tokens > 0
            queue.appendleft((out, completes))
            step += 1
            if step > MAX_STEPS:
                raise RuntimeError(f"{scenario.name}: no end after {MAX_STEPS} steps")
            if len(queue) < queue_size and (model_executed or scheduler.has_requests()):
                continue
        elif not queue:
            raise RuntimeError(f"{scenario.name}: nothing to schedule before step {step} (an idle engine)")
        out, completes = queue.pop()
        rids = list(out.num_scheduled_tokens)
        fake = ModelRunnerOutput(req_ids=rids, sampled_token_ids=[[SAMPLED] if r in completes else [] for r in rids])
        scheduler.update_from_output(out, fake)
        for rid in completes:
            finished_at[rid] = step - 1      # the last step scheduled when its output came back
            arrivals.finished += 1
    return {"oracle": "vllm", "version": vllm.__version__, "scenario": scenario.name,
            "settings": s | {"batches_in_flight": queue_size, "scheduler": type(scheduler).__name__},
            "arrival_step": {r: st["step"] for st in steps for r in st["arrived"]},
            "first_scheduling": first,
            "steps": steps}, 1000 * sum(host_s) / max(1, len(host_s))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="", help="comma-separated fixture names (default: all)")
    args = ap.parse_args()
    logging.getLogger("vllm").setLevel(logging.WARNING)
    init_none_hash(sha256)
    wanted = {n for n in args.only.split(",") if n}
    for name, scenario, settings in RUNS:
        if wanted and name not in wanted:
            continue
        fixture, host_ms = run(load(scenario), settings)
        path = write_fixture(name, fixture)
        hits = ", ".join(f"{r}@{v['step']}={v['hit']}" for r, v in list(fixture["first_scheduling"].items())[:6])
        print(f"{path.name}: {len(fixture['steps'])} steps, {host_ms:.2f} ms a schedule(); first scheduling "
              f"(request@step=hit) {hits}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
