"""``wavepp admission-bench``: admission latency (lookup + lease + escrow) and store round trips."""

from __future__ import annotations

import argparse
import json
from typing import Any

from wavepp.runtime.cli.args import Handler, UsageError, output_file, positive_int, write_text


def register(sub: Any) -> dict[str, Handler]:
    a = sub.add_parser("admission-bench", help="admission latency (lookup + lease + escrow) and store round trips")
    a.add_argument("--store", default="memory", help="memory or redis://host:port/db")
    a.add_argument("--stages", type=positive_int, default=4, help="pipeline stages")
    a.add_argument("--prompt-tokens", type=positive_int, default=131072, help="tokens per prompt")
    a.add_argument("--block-size", type=positive_int, default=64, help="tokens per KV block")
    a.add_argument("--requests", type=positive_int, default=1000, help="requests admitted")
    a.add_argument("--seed", type=int, default=0, help="prompt seed")
    a.add_argument("--json", dest="json_path", type=output_file, default=None, help="write the figures here")
    return {"admission-bench": cmd_admission_bench}


def cmd_admission_bench(args: argparse.Namespace) -> int:
    import asyncio

    from wavepp.runtime.bench.admission import admission_bench
    from wavepp.store.base import StoreError
    if args.prompt_tokens < 2 * args.block_size:
        raise UsageError(f"--prompt-tokens must be at least 2 blocks ({2 * args.block_size})")
    try:
        result = asyncio.run(admission_bench(args.store, args.stages, args.prompt_tokens, args.block_size,
                                             args.requests, args.seed))
    except (StoreError, ValueError) as exc:
        raise UsageError(str(exc)) from None
    r = result.as_dict()
    print(f"store={r['store']} stages={r['stages']} prompt={r['prompt_tokens']} tokens block={r['block_size']} "
          f"requests={r['requests']}")
    print(f"admission latency p50 {r['latency_p50_s'] * 1e3:.4f} ms  p99 {r['latency_p99_s'] * 1e3:.4f} ms  "
          f"(hashing p50 {r['hashing_p50_s'] * 1e3:.3f} ms, reused {r['reused_blocks_mean']:.0f} blocks, "
          f"{r['round_trips_per_request']:.2f} store round trips per request)")
    if args.json_path:
        keys = ("store", "stages", "prompt_tokens", "requests", "latency_p50_s", "latency_p99_s", "hashing_p50_s",
                "round_trips_per_request")
        write_text(args.json_path, json.dumps({k: r[k] for k in keys}, indent=1))
    return 0
