"""``wavepp check-engine``: the torch engine against Hugging Face transformers, same weights."""

from __future__ import annotations

import argparse
from typing import Any

from wavepp.runtime.cli.args import Handler, RunFailed, UsageError, positive_int
from wavepp.runtime.engines.launchers import LAUNCHER_HELP, LAUNCHERS
from wavepp.runtime.engines.model_names import torch_models


def register(sub: Any) -> dict[str, Handler]:
    e = sub.add_parser("check-engine", help="torch engine vs Hugging Face transformers, same weights")
    e.add_argument("--model", default="tiny-llama", help=torch_models())
    e.add_argument("--pp", type=positive_int, default=2, help="pipeline stages")
    e.add_argument("--block-size", type=positive_int, default=16, help="tokens per KV block")
    e.add_argument("--chunk", type=positive_int, default=64, help="tokens per chunk")
    e.add_argument("--reuse", type=int, default=40, help="tokens shared with an earlier request (may end mid-block)")
    e.add_argument("--seed", type=int, default=0, help="weights and prompt seed")
    e.add_argument("--launcher", choices=LAUNCHERS, default="threads", help=LAUNCHER_HELP)
    return {"check-engine": cmd_check_engine}


def cmd_check_engine(args: argparse.Namespace) -> int:
    from wavepp.runtime.engines.torch.check import run_check
    if args.reuse < 0:
        raise UsageError(f"--reuse must be >= 0, got {args.reuse}")
    try:
        r = run_check(args.model, args.pp, args.block_size, args.chunk, args.reuse, args.seed,
                      launcher=args.launcher)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    print(f"max relative error: logits {r.max_rel_err_logits:.3e}, stored K/V {r.max_rel_err_kv:.3e} "
          f"(tolerance {r.tol:.0e}) -> {'OK' if r.ok else 'MISMATCH'}")
    if r.non_finite is not None:
        raise RunFailed(f"check-engine: NaN or infinity in the {r.non_finite}")
    return 0 if r.ok else 1
