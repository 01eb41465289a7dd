"""Drive SGLang 0.5.23's own ``Scheduler`` on the oracle scenarios (CPU, PP 1); record each round's decisions.

Runs in ``.venv-oracle`` with ``sglang==0.5.23`` installed without its dependencies (vLLM's torch; see
tests/data/oracle/README.md). The scheduler is built as ``run_scheduler_process`` builds it (``publish`` the
runtime context, then ``Scheduler(server_args, port_args)``) on a CPU with dummy weights for
scripts/oracle/model/config.json, and its loop is ``Scheduler.event_loop_normal``'s body, one call a step:
``get_next_batch_to_run`` (which first stashes the chunk that ran last: ``stash_chunked_request`` ->
``tree_cache.checkpoint``), ``run_batch`` (the model runs, on the CPU), ``process_batch_result``.

Per step the fixture records the extend tokens per request and, for a request scheduled for the first time, its
prefix (``req.prefix_len``: what ``match_prefix`` gave it when it joined the batch).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from array import array
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import sglang  # noqa: E402
from scenarios import Arrivals, Scenario, load, write_fixture  # noqa: E402
from sglang.srt.managers import scheduler as sched_mod  # noqa: E402
from sglang.srt.managers.io_struct import TokenizedGenerateReqInput  # noqa: E402
from sglang.srt.sampling.sampling_params import SamplingParams  # noqa: E402
from sglang.srt.server_args import PortArgs, ServerArgs  # noqa: E402

MODEL_DIR = Path(__file__).resolve().parent / "model"
MAX_STEPS = 10_000

RUNS: list[tuple[str, str, dict[str, Any]]] = [
    ("sglang-one-document-8192", "one-document", {"chunked_prefill_size": 8192}),
    ("sglang-zipf-docs-8192", "zipf-docs", {"chunked_prefill_size": 8192}),
]


def build(s: dict[str, Any]) -> Any:
    args = ServerArgs(model_path=str(MODEL_DIR), skip_tokenizer_init=True, device="cpu", pp_size=1,
                      chunked_prefill_size=s["chunked_prefill_size"], page_size=s["page_size"],
                      disable_cuda_graph=True, load_format="dummy", disable_overlap_schedule=True)
    port = PortArgs.init_new(args)
    sched_mod.publish(args, role="scheduler", ranks=sched_mod.SpawnRanks(world_rank=0, dp_rank=None, gpu_id=0))
    return args, sched_mod.Scheduler(args, port)


def run(scenario: Scenario, settings: dict[str, Any]) -> tuple[dict[str, Any], float]:
    s = {"page_size": 16} | settings
    args, scheduler = build(s)
    arrivals = Arrivals(scenario)
    steps: list[dict[str, Any]] = []
    first: dict[str, dict[str, int]] = {}
    done: set[str] = set()
    host = []
    step = 0
    while len(done) < len(scenario.requests):
        arrived = arrivals.due(step)
        for r in arrived:
            params = SamplingParams(max_new_tokens=1, ignore_eos=True)
            params.normalize(None)
            scheduler.handle_generate_request(TokenizedGenerateReqInput(
                rid=r.id, input_text=None, input_ids=array("q", r.tokens()), input_embeds=None, mm_inputs=None,
                token_type_ids=None,
                sampling_params=params, return_logprob=False, logprob_start_len=-1, top_logprobs_num=0,
                token_ids_logprob=None, stream=False))
        t0 = time.perf_counter()
        plan = scheduler.get_next_batch_to_run(running_batch=scheduler.running_batch, last_batch=scheduler.last_batch)
        host.append(time.perf_counter() - t0)
        scheduler.running_batch = plan.running_batch
        batch = plan.batch_to_run
        scheduled: dict[str, int] = {}
        hits: dict[str, int] = {}
        if batch is not None and batch.forward_mode.is_extend():
            for req, n in zip(batch.reqs, batch.extend_lens, strict=True):
                scheduled[req.rid] = int(n)
                if req.rid not in first:
                    hits[req.rid] = int(req.prefix_len)
                    first[req.rid] = {"step": step, "hit": hits[req.rid]}
        steps.append({"step": step, "arrived": [r.id for r in arrived], "scheduled": scheduled, "first": hits})
        if batch is not None:
            result = scheduler.run_batch(batch)
            scheduler.process_batch_result(batch, result)
            for req in batch.reqs:
                if req.finished() and req.rid not in done:
                    done.add(req.rid)
                    arrivals.finished += 1
        scheduler.last_batch = batch
        step += 1
        if step > MAX_STEPS:
            raise RuntimeError(f"{scenario.name}: no end after {MAX_STEPS} steps")
    return {"oracle": "sglang", "version": sglang.__version__, "scenario": scenario.name,
            "settings": s | {"pp_size": 1, "batches_in_flight": 1, "schedule_policy": args.schedule_policy,
                             "max_prefill_tokens": args.max_prefill_tokens, "block_size": s["page_size"]},
            "arrival_step": {r: st["step"] for st in steps for r in st["arrived"]},
            "first_scheduling": first, "steps": steps}, 1000 * sum(host) / max(1, len(host))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="", help="comma-separated fixture names (default: all)")
    args = ap.parse_args()
    wanted = {n for n in args.only.split(",") if n}
    if len(wanted) != 1:        # a process builds one scheduler (init_parallel_runtime runs once a process)
        names = [name for name, _, _ in RUNS if not wanted or name in wanted]
        return max(subprocess.run([sys.executable, __file__, "--only", name]).returncode for name in names)
    for name, scenario, settings in RUNS:
        if name not in wanted:
            continue
        fixture, host_ms = run(load(scenario), settings)
        path = write_fixture(name, fixture)
        hits = ", ".join(f"{r}@{v['step']}={v['hit']}" for r, v in list(fixture["first_scheduling"].items())[:6])
        print(f"{path.name}: {len(fixture['steps'])} steps, {host_ms:.2f} ms a get_next_batch_to_run(); first "
              f"scheduling (request@step=hit) {hits}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
