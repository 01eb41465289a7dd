"""The autopilot's flags, shared by ``wavepp bench`` and ``wavepp serve`` (runtime/autopilot)."""

from __future__ import annotations

import argparse
from typing import Any

from wavepp.runtime.cli.args import positive_float


def add_flags(parser: argparse.ArgumentParser, window_default: str) -> None:
    parser.add_argument("--autopilot", choices=["off", "advise", "on"], default="off",
                        help="tune the scheduling knobs every window: advise (say what it would change) or on "
                             "(apply it, judged on the next window and rolled back if worse); default off")
    parser.add_argument("--autopilot-window", type=positive_float, default=None, metavar="SECONDS",
                        help=f"the autopilot's window, on the run's clock (default {window_default})")
    parser.add_argument("--autopilot-bounds", default=None, metavar="KNOB=LO:HI,...",
                        help="the knobs the autopilot may set and their ranges (default: max_wave_tokens, "
                             "min_wave_tokens and ring over their whole ranges)")
    parser.add_argument("--autopilot-search", type=positive_float, default=None, metavar="SECONDS",
                        help="wall-clock limit of one search (default 60)")


def settings(args: argparse.Namespace, window_s: float) -> Any:
    """The settings the flags ask for (None: the autopilot is off); ValueError in one line."""
    from wavepp.runtime.autopilot.settings import from_dict, parse_bounds
    if args.autopilot == "off":
        given = (("--autopilot-window", args.autopilot_window), ("--autopilot-bounds", args.autopilot_bounds),
                 ("--autopilot-search", args.autopilot_search))
        for flag, value in given:
            if value is not None:
                raise ValueError(f"{flag}: only with --autopilot advise or on")
        return None
    raw: dict[str, Any] = {"mode": args.autopilot, "window_s": args.autopilot_window or window_s}
    if args.autopilot_bounds is not None:
        raw["bounds"] = parse_bounds(args.autopilot_bounds)
    if args.autopilot_search is not None:
        raw["search_s"] = args.autopilot_search
    return from_dict(raw)
