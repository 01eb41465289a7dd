"""``wavepp calibrate-coordination``: admission and cache costs measured on this machine's CPU (the
sim charges them)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from wavepp.runtime.cli.args import Handler, UsageError, output_file, write_text


def register(sub: Any) -> dict[str, Handler]:
    c = sub.add_parser("calibrate-coordination", help="measure admission/cache costs on this machine's CPU")
    c.add_argument("--redis", default=None, help="also measure one round trip to this Redis URL")
    c.add_argument("--json", dest="json_path", type=output_file, default=None)
    return {"calibrate-coordination": cmd_calibrate_coordination}


def cmd_calibrate_coordination(args: argparse.Namespace) -> int:
    from wavepp.runtime.engines.coordination import measure
    from wavepp.store.base import StoreError
    try:
        costs = measure(redis_url=args.redis).as_dict()
    except StoreError as exc:
        raise UsageError(str(exc)) from None
    for k, v in costs.items():
        print(f"{k:34s} {v * 1e6:9.3f} us")
    if args.json_path:
        write_text(args.json_path, json.dumps(costs, indent=1))
    return 0
