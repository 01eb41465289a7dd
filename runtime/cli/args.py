"""What every subcommand shares: the two errors a handler raises (:class:`UsageError`, exit 2;
:class:`RunFailed`, exit 1), the parser that turns argparse's own errors into the first, the
argument types (each bad value one line naming it), writing an output file, and ``--set NAME=VALUE``."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, NoReturn

from wavepp.runtime.control import values
from wavepp.runtime.control.values import for_argparse

#: what a subcommand's handler is: the parsed flags in, the exit code out
Handler = Callable[[argparse.Namespace], int]


class UsageError(Exception):
    """A bad flag value: reported as one line, exit code 2."""


class RunFailed(Exception):
    """A failure during the run (a store that never came back, an output that cannot be written,
    every request failed): reported as one line, exit code 1."""


class Parser(argparse.ArgumentParser):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # No abbreviations: a prefix of a flag must not silently become another flag (--store, which
        # `wavepp stack` does not take, was read as --store-deadline).
        super().__init__(*args, **{"allow_abbrev": False, **kwargs})

    def add_argument(self, *args: Any, **kwargs: Any) -> argparse.Action:
        """Every flag shows its default in its help (``--help``), unless its help already says it."""
        action = super().add_argument(*args, **kwargs)
        default = action.default
        if (action.help and action.help != argparse.SUPPRESS and "default" not in action.help
                and default not in (None, False, argparse.SUPPRESS, [])):
            shown = ",".join(map(str, default)) if isinstance(default, list | tuple) else str(default)
            action.help = f"{action.help} (default: {shown.replace('%', '%%')})"
        return action

    def error(self, message: str) -> NoReturn:   # argparse prints usage + message; we want one line
        raise UsageError(message)


# The argument types shared by every subcommand: runtime.control.values' parsers, as argparse types.
int_list = for_argparse(values.int_list)
non_negative_int_list = for_argparse(values.non_negative_int_list)
name_list = for_argparse(values.name_list)
positive_float = for_argparse(values.positive_float)
non_negative_int = for_argparse(values.non_negative_int)
port_number = for_argparse(values.port_number)
positive_int = for_argparse(values.positive_int)


def output_file(text: str) -> str:
    """A path we will write to: checked before any work is done - its folder exists and is writable,
    and it is not a folder itself (a full disk can only show when writing: see :func:`write_output`)."""
    path = Path(text).expanduser()
    parent = path.resolve().parent
    if not parent.is_dir():
        raise argparse.ArgumentTypeError(f"cannot write {text!r}: folder {str(parent)!r} does not exist")
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"cannot write {text!r}: it is a folder")
    if not os.access(path if path.exists() else parent, os.W_OK):
        where = "it" if path.exists() else f"folder {str(parent)!r}"
        raise argparse.ArgumentTypeError(f"cannot write {text!r}: {where} is not writable")
    return text


def write_output(path: str | Path, write: Any) -> None:
    """Run ``write(tmp)`` on a file beside ``path`` (its name ends as path's does: writers choose
    gzip by it) and move it into place, so ``path`` is either whole or untouched; a path that is a
    device, a FIFO or a link is written directly. An OS error (disk full, permissions changed
    meanwhile) is one line, exit 1, and leaves no partial file."""
    target = Path(path)
    # A device (/dev/stdout, /dev/full), a FIFO or a link: written where it leads, never replaced.
    direct = target.is_symlink() or (target.exists() and not target.is_file())
    tmp = target if direct else target.with_name(f".tmp-{os.getpid()}-{target.name}")
    try:
        write(tmp)
        if not direct:
            os.replace(tmp, target)
    except BaseException as exc:
        if not direct:
            tmp.unlink(missing_ok=True)
        if isinstance(exc, OSError):
            raise RunFailed(f"cannot write {str(path)!r}: {exc.strerror or exc}") from None
        raise


def write_outputs(outputs: Iterable[tuple[str | None, Any, str]]) -> None:
    """Each ``(path, write, said)`` whose path is given: written (:func:`write_output`) and ``said``
    printed. One that cannot be written does not stop the others; their errors are one line at the end."""
    errors = []
    for path, write, said in outputs:
        if not path:
            continue
        try:
            write_output(path, write)
        except RunFailed as exc:
            errors.append(str(exc))
            continue
        print(said)
    if errors:
        raise RunFailed("; ".join(errors))


def write_text(path: str | Path, text: str) -> None:
    """:func:`write_output` of a text (a JSON or Markdown output)."""
    write_output(path, lambda p: Path(p).write_text(text))


# ---- --set NAME=VALUE -----------------------------------------------------------------------------
def add_set_flag(parser: argparse.ArgumentParser, help: str) -> None:
    """``--set NAME=VALUE``, repeatable, into ``args.changes`` (split by :func:`set_texts`)."""
    parser.add_argument("--set", dest="changes", action="append", default=[], metavar="NAME=VALUE", help=help)


def set_texts(items: Sequence[str]) -> dict[str, str]:
    """The ``--set`` items as {knob name: value text} (a later one wins), each value still text: the
    knob's own type parses it (``runtime.control.knobs.parse_texts``). Called by the handler, not by argparse,
    so the message is the command's own (``--set takes NAME=VALUE, got 'ring'``) and comes where the
    handler checks it (after the run file, for ``preview``)."""
    raw = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise UsageError(f"--set takes NAME=VALUE, got {item!r}")
        raw[name.strip()] = value
    return raw
