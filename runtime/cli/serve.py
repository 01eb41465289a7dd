"""``wavepp serve``: the runtime as an HTTP server (:mod:`runtime.serve`); every flag also a
``WAVEPP_*`` variable (:data:`runtime.serve.config.OPTIONS`)."""

from __future__ import annotations

import argparse
from typing import Any

from wavepp.runtime.cli.args import Handler, RunFailed, UsageError
from wavepp.runtime.serve.config import add_arguments


def register(sub: Any) -> dict[str, Handler]:
    srv = sub.add_parser("serve", help="the runtime as an HTTP server: /v1/prefill, /v1/completions, knobs, state")
    add_arguments(srv)
    return {"serve": cmd_serve}


def cmd_serve(args: argparse.Namespace) -> int:
    from wavepp.runtime.control.knobs import KnobError
    from wavepp.runtime.serve.config import resolve
    from wavepp.runtime.serve.main import run_server
    from wavepp.store.base import StoreError
    from wavepp.store.resilient import StoreGone
    try:
        settings = resolve(vars(args))
        return run_server(settings)
    except (ValueError, KnobError) as exc:
        raise UsageError(str(exc)) from None
    except StoreGone as exc:            # the store went away while serving and did not come back in time
        raise RunFailed(f"store: {exc}") from None
    except StoreError as exc:           # unusable from the start (unreachable, a wrong password, not Redis)
        raise UsageError(f"store: {exc}") from None
