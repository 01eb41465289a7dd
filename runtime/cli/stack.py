"""``wavepp stack``: redis-server, ``wavepp serve`` and the dashboard as processes on loopback
(:mod:`runtime.serve.stack`); it takes ``serve``'s flags and passes them on."""

from __future__ import annotations

import argparse
from typing import Any

from wavepp.runtime.cli.args import Handler, RunFailed, UsageError, port_number
from wavepp.runtime.serve.config import add_arguments


def register(sub: Any) -> dict[str, Handler]:
    stk = sub.add_parser("stack", help="redis-server, wavepp serve and the dashboard as processes on loopback")
    add_arguments(stk, skip=("store",))       # the stack starts its own redis-server
    stk.add_argument("--dashboard-port", type=port_number, default=8501, help="the dashboard's port (0: a free one)")
    stk.add_argument("--redis-port", type=port_number, default=0,
                     help="the private redis-server's port (0: a free one)")
    stk.add_argument("--cluster", default="wavepp", help="the store's cluster name")
    return {"stack": cmd_stack}


def cmd_stack(args: argparse.Namespace) -> int:
    from wavepp.runtime.serve.stack import StackError, run_stack
    try:
        return run_stack(vars(args), args.dashboard_port, args.redis_port, args.cluster)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    except StackError as exc:
        raise RunFailed(str(exc)) from None
