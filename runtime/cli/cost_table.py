"""``wavepp cost-table``: the sim's analytic vs kernel-table step time of one stage, as Markdown."""

from __future__ import annotations

import argparse
from typing import Any

from wavepp.runtime.cli.args import Handler, UsageError, int_list, non_negative_int, non_negative_int_list, positive_int
from wavepp.runtime.engines.model_names import table_models
from wavepp.runtime.engines.sim.perf_tables import PERF_DIR_ENV


def register(sub: Any) -> dict[str, Handler]:
    t = sub.add_parser("cost-table", help="sim: analytic vs kernel-table step time of one stage, as Markdown")
    t.add_argument("--model", default="glm-5.2", help=f"a model the kernel tables cover: {table_models('glm-5.2')}")
    t.add_argument("--hardware", default="b300", help="h200, b300")
    t.add_argument("--pp", type=positive_int, default=4, help="pipeline stages")
    t.add_argument("--stage", type=non_negative_int, default=1, help="which stage (default 1: no embedding or LM head)")
    t.add_argument("--gpus-per-stage", type=positive_int, default=None, help="default GPUs per node / pp")
    t.add_argument("--tokens", type=int_list, default=[1024, 2048, 4096, 8192, 16384], help="new tokens x")
    t.add_argument("--context", type=non_negative_int_list, default=[0, 32768, 131072], help="cached tokens L")
    t.add_argument("--perf-dir", default=None,
                   help=f"kernel tables folder (default ${PERF_DIR_ENV} or ../shared/data/perf)")
    return {"cost-table": cmd_cost_table}


def cmd_cost_table(args: argparse.Namespace) -> int:
    from wavepp.runtime.engines.sim.cost_compare import compare_step_times, markdown
    try:
        rows = compare_step_times(args.model, args.hardware, args.pp, args.stage, args.tokens, args.context,
                                  args.gpus_per_stage, args.perf_dir)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    print(f"{args.model} on {args.hardware}, PP{args.pp}, stage {args.stage}: one chunk of x new tokens after L cached")
    print(markdown(rows))
    return 0
