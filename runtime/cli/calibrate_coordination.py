"""``wavepp calibrate-coordination``: admission and cache costs measured on this machine's CPU (the
sim charges them)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from wavepp.runtime.cli.args import Handler, UsageError, output_file, positive_int, write_text

# Not measured by this command: what each is instead (printed as such, never as a measurement).
NOT_MEASURED = {"stage_message_s": "cited (the hardware profile's p2p latency)",
                "host_work_scale": "a factor (--host-scale), not a time"}


def register(sub: Any) -> dict[str, Handler]:
    c = sub.add_parser("calibrate-coordination", help="measure admission/cache costs on this machine's CPU")
    c.add_argument("--redis", default=None, help="also measure one round trip to this Redis URL")
    c.add_argument("--prompt-tokens", type=positive_int, default=131072,
                   help="the prompt the per-block and per-token costs are measured on (default 131072; "
                        "long contexts: 262144)")
    c.add_argument("--block-size", type=positive_int, default=64, help="tokens per KV block (default 64)")
    c.add_argument("--json", dest="json_path", type=output_file, default=None, help="write the costs here")
    return {"calibrate-coordination": cmd_calibrate_coordination}


def cmd_calibrate_coordination(args: argparse.Namespace) -> int:
    from wavepp.runtime.engines.coordination import measure
    from wavepp.store.base import StoreError
    if args.prompt_tokens < 2 * args.block_size:
        raise UsageError(f"--prompt-tokens must be at least 2 blocks ({2 * args.block_size})")
    try:
        costs = measure(args.prompt_tokens // args.block_size, args.block_size, redis_url=args.redis).as_dict()
    except StoreError as exc:
        raise UsageError(str(exc)) from None
    not_measured = dict(NOT_MEASURED)
    if not args.redis:
        not_measured["redis_rtt_s"] = "recorded (give --redis URL to measure it)"
    for k, v in costs.items():
        if k in not_measured:
            value = f"{v:9.3f}" if k == "host_work_scale" else f"{v * 1e6:9.3f} us"
            print(f"{k:34s} {value}   ({not_measured[k]})")
        else:
            print(f"{k:34s} {v * 1e6:9.3f} us")
    if args.json_path:
        write_text(args.json_path, json.dumps(costs, indent=1))
    return 0
