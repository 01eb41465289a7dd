"""The ``wavepp`` command. Thin: parse, validate, call; every bad value is one line and exit 2.

One module per subcommand (as vLLM's ``entrypoints/cli/``), each with ``register(subparsers)``, which
adds its parser and returns its handlers by command name; what they share is :mod:`.args`. Here:
the parser assembled from them, and the one place that turns a handler's outcome into an exit code
(:func:`main`). A subcommand imports its heavy modules inside its handler, so ``wavepp --help`` and a
bad flag answer at once.
"""

from __future__ import annotations

import argparse
import os
import select
import signal
import sys
import traceback
from collections.abc import Sequence
from typing import Any

from wavepp.runtime.cli import (
    admission_bench,
    bench,
    calibrate,
    calibrate_coordination,
    check_engine,
    cost_table,
    dashboard,
    grid,
    knobs,
    serve,
    stack,
    trace,
    whatif,
)
from wavepp.runtime.cli.args import Handler, Parser, RunFailed, UsageError

__all__ = ["EXIT_FAILED", "EXIT_USAGE", "RunFailed", "UsageError", "build_parser", "main"]

EXIT_USAGE = 2
EXIT_FAILED = 1

#: the subcommands, in the order ``wavepp --help`` lists them
COMMANDS = (bench, grid, admission_bench, dashboard, knobs, calibrate, check_engine, cost_table, whatif,
            calibrate_coordination, trace, serve, stack)


def build_parser() -> Parser:
    return _build()[0]


def _build() -> tuple[Parser, dict[str, Handler]]:
    """The parser, and each command's handler."""
    parser = Parser(prog="wavepp", description="Pipeline-parallel prefill runtime with off-critical-path admission.")
    parser.add_argument("--verbose", action="store_true", help="print the traceback of an error")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=Parser)
    handlers: dict[str, Handler] = {}
    for command in COMMANDS:
        handlers.update(command.register(sub))
    _add_verbose(sub)
    return parser, handlers


def _add_verbose(sub: Any) -> None:
    """``--verbose`` on every subcommand, nested ones too (``wavepp trace export … --verbose`` as well
    as ``wavepp --verbose trace export …``); SUPPRESS keeps the top level's value where it is not given."""
    for p in sub.choices.values():
        p.add_argument("--verbose", action="store_true", default=argparse.SUPPRESS,
                       help="print the traceback of an error")
        for action in p._actions:
            if isinstance(action, argparse._SubParsersAction):
                _add_verbose(action)


def main(argv: Sequence[str] | None = None) -> int:
    """Every error ends in one line on stderr (``wavepp: error: …``): exit 2 for bad input, 1 for a
    failure during the run, 130/143 for SIGINT/SIGTERM; the traceback only with ``--verbose``. A
    reader of stdout that went away (``| head -1``) ends it quietly with 141, as SIGPIPE would."""
    parser, handlers = _build()
    verbose = False
    interrupts = _Interrupts()
    try:
        args = parser.parse_args(argv)
        verbose = args.verbose
        if getattr(args, "launcher", None) == "torchrun" and serve_if_worker():
            return 0
        handler = handlers[args.command]
        with interrupts:
            code = handler(args)
        sys.stdout.flush()          # a reader gone (`| head -1`) is found here, not at the interpreter's exit
        return code
    except BrokenPipeError as exc:        # stdout's reader, or else a socket or a child's pipe: a failure
        return _quiet_after_sigpipe() if _stdout_reader_gone() else _failed(exc, verbose)
    except UsageError as exc:
        return _error(str(exc), EXIT_USAGE, verbose)
    except RunFailed as exc:
        return _error(str(exc), EXIT_FAILED, verbose)
    except KeyboardInterrupt:
        if verbose:
            traceback.print_exc()
        print(f"wavepp: interrupted ({interrupts.name})", file=sys.stderr)
        return 128 + signal.Signals[interrupts.name].value
    except Exception as exc:
        return _failed(exc, verbose)


def _failed(exc: Exception, verbose: bool) -> int:
    """An unexpected error: its type and first line, exit 1."""
    first = (str(exc).strip().splitlines() or [""])[0]
    return _error(f"{type(exc).__name__}: {first}" if first else type(exc).__name__, EXIT_FAILED, verbose)


def _stdout_reader_gone() -> bool:
    """Whether stdout is a pipe whose reader closed it (poll says POLLERR on its write end)."""
    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        return any(events & select.POLLERR for _, events in poller.poll(0))
    except (OSError, ValueError, AttributeError):      # no stdout, or not a file: not a reader that left
        return False


def _quiet_after_sigpipe() -> int:
    """Stop as a tool killed by SIGPIPE does (``git log | head -1``): no message, exit 128 + SIGPIPE.
    stdout goes to /dev/null first, so the interpreter's last flush of what is buffered cannot fail."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return 128 + signal.SIGPIPE.value


def _error(message: str, code: int, verbose: bool) -> int:
    if verbose:
        traceback.print_exc()
    print(f"wavepp: error: {message}", file=sys.stderr)
    return code


class _Interrupts:
    """SIGTERM stops the command the way Ctrl-C does - inside an asyncio run, through asyncio's own
    SIGINT handler (the main task is cancelled and every task unwinds; raising from the handler
    would strike whichever task runs and leave "Task exception was never retrieved"), else as a
    KeyboardInterrupt - so ``finally`` blocks run and stage processes are stopped. Remembers which
    signal came, for the message and the exit code."""

    def __init__(self) -> None:
        self.name = "SIGINT"
        self._previous: Any = None

    def __enter__(self) -> _Interrupts:
        try:
            self._previous = signal.signal(signal.SIGTERM, self._on_sigterm)
        except ValueError:                # not the main thread (an embedding): leave signals alone
            pass
        return self

    def __exit__(self, *exc: object) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGTERM, self._previous)

    def _on_sigterm(self, signum: int, frame: Any) -> None:
        self.name = "SIGTERM"
        on_sigint = signal.getsignal(signal.SIGINT)
        if callable(on_sigint) and on_sigint is not signal.default_int_handler:
            on_sigint(signal.SIGINT, frame)
        else:
            raise KeyboardInterrupt


def serve_if_worker() -> bool:
    """Under torchrun every rank runs this command: ranks 1..P-1 serve their stage until rank 0 ends."""
    from wavepp.runtime.engines.torch.processes.launch import torchrun_rank
    ranks = torchrun_rank()
    if ranks is None:
        raise UsageError("--launcher torchrun: start the command with torchrun (RANK/WORLD_SIZE are not set)")
    rank, size = ranks
    if rank == 0:
        return False
    import torch

    from wavepp.runtime.engines.torch.processes.stage_server import serve_stage
    serve_stage(rank, size, "env://", torch.cuda.is_available())
    return True
