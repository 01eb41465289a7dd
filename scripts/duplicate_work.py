"""Duplicate prefix work under a ``docs`` workload, read from a run's spans.

For each policy, one sim run of ``docs:N`` (documents no stage holds at first); from each request's span
(its prompt length names its document, its admitted event its reuse) count the later requests of a
document that computed the document again, split by whether an earlier request of that document was
still in flight when they were admitted, and the tokens they computed again.

    python scripts/duplicate_work.py --workload docs:13:suffix=4096 --prompt-tokens 262144 \\
        --concurrency 32 --requests 128 --policy wavepp,wavepp+share=off,trtllm-pp-legacy
"""

from __future__ import annotations

import argparse
import collections
import time

from wavepp.runtime.bench.runs import BenchConfig, run_one
from wavepp.runtime.engines.config import SimConfig
from wavepp.runtime.engines.sim.engine import SimEngine
from wavepp.runtime.sources.workloads import parse_workload
from wavepp.telemetry import names as N


def duplicates(encoded: list[dict], suffix: int, block: int) -> tuple[int, int, int, int]:
    """(documents, requests recomputing while an earlier one was in flight, after it ended, tokens)."""
    docs: dict[int, list[tuple[int, int, int]]] = collections.defaultdict(list)
    for s in encoded:
        admitted = [e for e in s.get("ev", []) if e[0] == N.EVENT_ADMITTED] if s["n"] == N.REQUEST else []
        if admitted:
            doc = int(s["a"][N.GEN_AI_INPUT_TOKENS]) - suffix
            docs[doc].append((admitted[-1][1], s["t1"], int(admitted[-1][2][N.REUSE_BLOCKS]) * block))
    in_flight = after = tokens = 0
    for doc, reqs in docs.items():
        reqs.sort()
        for i, (t_admitted, _, reuse) in enumerate(reqs):
            if i == 0 or reuse >= doc - block:
                continue
            tokens += doc - reuse
            if any(end > t_admitted for _, end, _ in reqs[:i]):
                in_flight += 1
            else:
                after += 1
    return len(docs), in_flight, after, tokens


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="glm-5.2")
    p.add_argument("--hardware", default="b300")
    p.add_argument("--pp", type=int, default=4)
    p.add_argument("--workload", default="docs:13:suffix=4096")
    p.add_argument("--prompt-tokens", type=int, default=262144)
    p.add_argument("--concurrency", type=int, default=32)
    p.add_argument("--requests", type=int, default=128)
    p.add_argument("--policy", default="wavepp,wavepp+share=off,trtllm-pp-legacy")
    args = p.parse_args()
    spec = parse_workload(args.workload)
    engine = SimEngine(SimConfig(args.model, args.hardware, args.pp))
    policies = args.policy.split(",")
    for policy in policies:
        cfg = BenchConfig(spec, [args.concurrency], policies, args.requests, 0, args.prompt_tokens,
                          knobs=engine.default_knobs(), model_name=args.model, hardware_name=args.hardware)
        started = time.perf_counter()
        rec = run_one(engine, cfg, policy, args.concurrency)
        f = rec.figures
        n_docs, in_flight, after, tokens = duplicates(rec.encoded, spec.suffix_tokens, engine.block_size)
        computed = (f.computed_tokens_per_s or 0) * (f.makespan_s or 0)
        print(f"{policy}: input {f.input_tokens_per_s or 0:,.0f} tok/s, computed {computed:,.0f} tokens, "
              f"fallbacks {f.fallbacks}; {n_docs} documents: {in_flight} requests recomputed theirs while an "
              f"earlier one was in flight, {after} after it ended, {tokens:,} tokens "
              f"({time.perf_counter() - started:.1f} s)")


if __name__ == "__main__":
    main()
