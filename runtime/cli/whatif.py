"""``wavepp preview`` and ``wavepp suggest``: a saved run's arrivals replayed in the sim under its
knobs and changed ones (:mod:`runtime.whatif.preview`), or a small grid of them searched for a goal
(:mod:`runtime.whatif.suggest`); nothing is applied."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import Any, TypeVar

from wavepp.runtime.cli.args import (
    Handler,
    RunFailed,
    UsageError,
    add_set_flag,
    output_file,
    positive_float,
    set_texts,
    write_text,
)

T = TypeVar("T")


def register(sub: Any) -> dict[str, Handler]:
    for name, text in (("preview", "replay a saved run's arrivals in the sim under its knobs and changed ones"),
                       ("suggest", "search wave budget, its floor and the ring in the sim on a saved run's arrivals")):
        w = sub.add_parser(name, help=text)
        w.add_argument("runfile", help="a file saved by `wavepp bench --save-run`")
        w.add_argument("--run-id", default=None, help="which run of the file (default: the first)")
        if name == "preview":
            add_set_flag(w, "a proposed knob value (repeatable)")
        else:
            w.add_argument("--goal", choices=["throughput", "latency"], default="throughput",
                           help="highest input throughput, or lowest p95 prefill latency above --floor")
            w.add_argument("--floor", type=positive_float, default=None, metavar="TOKENS_PER_S",
                           help="latency goal: the least input throughput (default: the current knobs' predicted)")
        w.add_argument("--cost-profile", default=None,
                       help="the `wavepp calibrate` profile a torch run is replayed with (a sim run: its own model)")
        w.add_argument("--window", type=positive_float, default=None, metavar="SECONDS",
                       help="replay the arrivals of the run's last SECONDS (default: the whole run)")
        w.add_argument("--time-limit", type=positive_float, default=60.0, metavar="SECONDS",
                       help="stop the replays after this long (default 60)")
        w.add_argument("--json", dest="json_path", type=output_file, default=None,
                       help="write both settings' figures here")
    return {"preview": cmd_preview, "suggest": cmd_suggest}


def cmd_preview(args: argparse.Namespace) -> int:
    from wavepp.runtime.control.knobs import Deployment, KnobError, from_changes, parse_texts
    raw = set_texts(args.changes)
    if not raw:
        raise UsageError("give the proposed knobs with --set NAME=VALUE (e.g. --set ring=8)")
    changes, problems = parse_texts(raw)
    if problems:                          # said before the run file is read and a simulator built
        raise UsageError(str(KnobError(problems)))
    from wavepp.runtime.whatif import preview as whatif
    from wavepp.runtime.whatif.report import compare_rows, preview_dict, replay_check, spread_line
    replay, spec, current, observed = _whatif_inputs(args)
    try:
        proposed = from_changes(current.as_dict(), changes, Deployment(spec.block_size, spec.pp))
    except KnobError as exc:
        raise UsageError(str(exc)) from None
    result = _run_whatif(lambda progress: whatif.preview(replay, spec, current, proposed, args.time_limit,
                                                          progress))
    print(f"preview: {', '.join(f'{k}={v}' for k, v in result.changes.items()) or 'no knob changed'}; "
          f"replayed {result.replay_note} in the {result.sim}")
    check = "\n".join(line for line in (result.error.describe(), replay_check(result.current, observed),
                                        spread_line(result)) if line)
    _print_whatif(compare_rows(result.current.figures, result.proposed.figures, result.error), "proposed", check,
                  args.json_path, preview_dict(result))
    return 0


def cmd_suggest(args: argparse.Namespace) -> int:
    from wavepp.runtime.whatif.report import compare_rows, replay_check, suggestion_dict, suggestion_line
    from wavepp.runtime.whatif.suggest import Goal, suggest
    replay, spec, current, observed = _whatif_inputs(args)
    result = _run_whatif(lambda progress: suggest(replay, spec, current, Goal(args.goal, args.floor),
                                                  args.time_limit, progress))
    print(suggestion_line(result))
    print(f"(replayed {result.replay_note} in the {result.sim}; nothing was applied)")
    _print_whatif(compare_rows(result.current.figures, result.best.figures, result.error),
                  "suggested" if result.complete else "best so far",
                  f"{result.error.describe()}\n{replay_check(result.current, observed)}", args.json_path,
                  suggestion_dict(result))
    if not result.complete:   # the best of those tried is shown above; the search itself did not finish
        raise RunFailed(f"partial search: the time limit of {args.time_limit:g} s ended it after "
                        f"{len(result.tried)} of {result.planned} settings; nothing is proposed (continue with a "
                        f"longer --time-limit)")
    return 0


def _whatif_inputs(args: argparse.Namespace) -> tuple[Any, Any, Any, Any]:
    """(replay, sim, current knobs, the run's own figures over the replayed arrivals) of the saved run
    ``args`` names; UsageError says what is wrong."""
    from wavepp.runtime.runs.runfile import load_runs
    from wavepp.runtime.whatif import preview as whatif
    try:
        runs = load_runs(args.runfile)
        run = next((r for r in runs if r.id == args.run_id), None) if args.run_id else (runs[0] if runs else None)
        if run is None:
            raise ValueError(f"no run {args.run_id!r} in {args.runfile} (runs: {', '.join(r.id for r in runs)})")
        spec = whatif.sim_spec(run.meta, args.cost_profile)
        replay = whatif.replay_of(run.spans, run.meta, args.window)
        whatif.check_replay(replay)
        observed = whatif.observed_over(run.spans, replay, spec.pp)
        return replay, spec, whatif.knobs_at_end(run.meta, run.knob_changes), observed
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def _run_whatif(replays: Callable[[Any], T]) -> T:
    """Run ``replays(progress)`` with a progress line on a terminal (rewritten in place, ended
    here); past its time limit the command fails (exit 1), a replay that cannot run is bad input."""
    from wavepp.runtime.whatif import preview as whatif
    progress = None
    if sys.stderr.isatty():
        progress = lambda fraction, label: print(f"\r{fraction:5.0%} {label:24s}", end="",  # noqa: E731
                                                 file=sys.stderr, flush=True)
    try:
        return replays(progress)
    except whatif.TimeLimit as exc:
        raise RunFailed(str(exc)) from None
    except whatif.WhatIfError as exc:
        raise UsageError(str(exc)) from None
    finally:
        if progress is not None:
            print(file=sys.stderr)


def _print_whatif(rows: Any, proposed: str, replay_line: str, json_path: str | None, data: Any) -> None:
    """The side-by-side table, the replay check line, and the JSON when asked for."""
    from wavepp.runtime.whatif.report import table
    print(table(rows, ("figure", "current", proposed, "change")))
    print(replay_line)
    if json_path:
        write_text(json_path, json.dumps(data, indent=1))
