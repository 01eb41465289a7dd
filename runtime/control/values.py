"""Values an operator types - a flag, a ``WAVEPP_*`` environment variable - read from text: one parser per
kind, each refusal a ValueError whose message is one line naming what was wrong. ``wavepp``'s flags
(:mod:`runtime.cli.args`, through :func:`for_argparse`) and ``wavepp serve``'s settings
(:mod:`runtime.serve.config`) read them here, so one bad value reads the same wherever it is typed."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def positive_int(text: str) -> int:
    if not text.strip().lstrip("-").isdigit():
        raise ValueError(f"{text!r} is not an integer")
    if int(text) < 1:
        raise ValueError(f"must be >= 1, got {text.strip()}")
    return int(text)


def non_negative_int(text: str) -> int:
    if not text.strip().isdigit():
        raise ValueError(f"must be a whole number >= 0, got {text!r}")
    return int(text)


def positive_float(text: str) -> float:
    """A finite number > 0 (``inf`` would make work that never ends)."""
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{text!r} is not a number") from None
    if not (value > 0 and math.isfinite(value)):
        raise ValueError(f"must be a finite number > 0, got {text.strip()}")
    return value


def port_number(text: str) -> int:
    if not text.strip().isdigit() or int(text) > 65535:
        raise ValueError(f"{text!r} is not a TCP port (0-65535; 0 picks a free one)")
    return int(text)


def int_list(text: str) -> list[int]:
    """``8,32,128`` -> [8, 32, 128]; each a positive integer."""
    out = []
    for p in (part.strip() for part in text.split(",")):
        if not p.lstrip("-").isdigit():
            raise ValueError(f"malformed list {text!r}: {p!r} is not an integer")
        if int(p) < 1:
            raise ValueError(f"{text!r}: values must be >= 1, got {p}")
        out.append(int(p))
    return out


def non_negative_int_list(text: str) -> list[int]:
    """``0,32768`` -> [0, 32768]; each a whole number >= 0."""
    return [non_negative_int(p) for p in text.split(",")]


def name_list(text: str) -> list[str]:
    out = [p.strip() for p in text.split(",")]
    if not all(out):
        raise ValueError(f"malformed list {text!r}")
    return out


def switch(text: str) -> bool:
    value = text.strip().lower()
    if value not in ("1", "0", "on", "off", "true", "false", "yes", "no"):
        raise ValueError(f"must be on or off, got {text!r}")
    return value in ("1", "on", "true", "yes")


def secret_token(text: str) -> str:
    # The message never repeats the value: it is a secret, and this line goes to stderr.
    if not text or not text.isascii() or not text.isprintable() or " " in text:
        raise ValueError("must be printable ASCII without spaces (the value is not shown)")
    return text


def choice(*names: str) -> Callable[[str], str]:
    def parse(text: str) -> str:
        if text not in names:
            raise ValueError(f"must be one of {', '.join(names)}, got {text!r}")
        return text
    return parse


def for_argparse(parse: Callable[[str], T], name: str | None = None) -> Callable[[str], T]:
    """``parse`` as an argparse ``type``: its message becomes argparse's error (a bare ValueError would read
    'invalid value'), under ``name`` (argparse names the type in some errors)."""
    def parsed(text: str) -> T:
        try:
            return parse(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
    parsed.__name__ = name or parse.__name__
    return parsed
