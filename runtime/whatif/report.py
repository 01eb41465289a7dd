"""What-if results as rows: the side-by-side table the CLI prints and the Knobs page draws, and JSON."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from wavepp.runtime.figures.idle_causes import MEANING
from wavepp.runtime.figures.report import RunFigures, fmt
from wavepp.runtime.whatif.preview import Prediction, PreviewResult, ReplayError, gain, idle_shares
from wavepp.runtime.whatif.suggest import Suggestion

Row = tuple[str, str, str, str]          # figure, current, proposed (or observed), change

# (label, value of the figures, format, scale, True: relative change else absolute)
_FIGURES: list[tuple[str, Callable[[RunFigures], float | None], str, float, bool]] = [
    ("input tok/s", lambda f: f.input_tokens_per_s, ",.0f", 1.0, True),
    ("pipeline efficiency", lambda f: f.pipeline_efficiency, ".3f", 1.0, False),
    ("prefill p50 (s)", lambda f: f.prefill_latency_p50_s, ",.3f", 1.0, True),     # seconds, as every page
    ("prefill p95 (s)", lambda f: f.prefill_latency_p95_s, ",.3f", 1.0, True),
]
TOP_CAUSES = 4


WITHIN_NOISE = "within noise"


def _change(a: float | None, b: float | None, relative: bool, error: ReplayError | None) -> str:
    if a is None or b is None:
        return "-"
    text = fmt(gain(a, b), "+.1%") if relative else f"{b - a:+.3f}"
    noisy = error is not None and error.within(gain(a, b))     # efficiency too: relative to the current one
    return f"{text} ({WITHIN_NOISE})" if noisy else text


def compare_rows(a: RunFigures, b: RunFigures, error: ReplayError | None = None) -> list[Row]:
    """Figure by figure, ``a`` then ``b`` and the change - labelled within noise where it is no larger
    than the replay's ``error`` (None: ``b`` is not a prediction); then the idle causes (share of
    P x makespan) that weigh most in either."""
    rows: list[Row] = []
    for label, get, spec, scale, relative in _FIGURES:
        va, vb = get(a), get(b)
        rows.append((label, fmt(va, spec, scale), fmt(vb, spec, scale), _change(va, vb, relative, error)))
    rows.append(("requests completed", str(a.completed), str(b.completed), f"{b.completed - a.completed:+d}"))
    ia, ib = idle_shares(a), idle_shares(b)
    causes = sorted(set(list(ia)[:TOP_CAUSES]) | set(list(ib)[:TOP_CAUSES]),
                    key=lambda c: -max(ia.get(c, 0.0), ib.get(c, 0.0)))
    for cause in causes:
        va, vb = ia.get(cause, 0.0), ib.get(cause, 0.0)
        # in an operator's words, as the Pipeline page says it (the cause's name after it, for the JSON)
        rows.append((f"idle: {MEANING.get(cause, cause)} ({cause})", f"{va:.1%}", f"{vb:.1%}",
                     f"{(vb - va) * 100:+.1f} pt"))
    return rows


def table(rows: list[Row], headers: tuple[str, str, str, str]) -> str:
    """Plain text, columns aligned."""
    widths = [max(len(r[i]) for r in [headers, *rows]) for i in range(4)]
    lines = ["  ".join(h.ljust(w) if i == 0 else h.rjust(w) for i, (h, w) in enumerate(zip(r, widths, strict=True)))
             for r in [headers, *rows]]
    return "\n".join(lines)


def replay_check(current: Prediction, observed: RunFigures) -> str:
    """How the replay under the current knobs compares with what the run did over the same arrivals,
    and whether the figures shown were anchored on the run (:func:`runtime.whatif.preview.anchored`)."""
    replayed = current.replayed
    line = (f"the run itself over the same arrivals: {fmt(observed.input_tokens_per_s, ',.0f')} input tok/s, "
            f"pipeline efficiency {fmt(observed.pipeline_efficiency, '.3f')} (the replay of the current knobs: "
            f"{fmt(gain(observed.input_tokens_per_s, replayed.input_tokens_per_s), '+.1%')}, "
            f"{fmt(_diff(observed.pipeline_efficiency, replayed.pipeline_efficiency), '+.3f')})")
    if current.raw is not None:
        line += ("; the predictions of a real-time run are anchored on the run: rates and latencies scaled by "
                 "that ratio, efficiency as replayed")
    return line


def spread_line(result: PreviewResult) -> str:
    """How far apart the replays of each setting came (empty for a deterministic, single replay):
    how much to trust a difference between the two settings."""
    def spread(p: Prediction) -> str:
        return "-".join(fmt(x, ",.0f") for x in (min(p.throughputs), max(p.throughputs)))
    if len(result.current.throughputs) < 2 or len(result.proposed.throughputs) < 2:
        return ""
    return (f"the replays themselves (input tok/s, before anchoring): current {spread(result.current)}, "
            f"proposed {spread(result.proposed)} over {len(result.current.throughputs)} replays each")


def _diff(a: float | None, b: float | None) -> float | None:
    return b - a if a is not None and b is not None else None


def prediction_dict(p: Prediction) -> dict[str, Any]:
    """Knobs, figures (anchored on the run where it said), the replays' own figures and each replay's
    throughput, and the seconds the replays took."""
    return {"knobs": p.knobs, "figures": p.figures.as_dict(), "replayed": p.replayed.as_dict(),
            "replays_tokens_per_s": list(p.throughputs), "anchored": p.raw is not None, "seconds": p.seconds}


def preview_dict(result: PreviewResult) -> dict[str, Any]:
    return {"changes": result.changes, "replay": result.replay_note, "sim": result.sim,
            "current": prediction_dict(result.current), "proposed": prediction_dict(result.proposed),
            "throughput_gain": result.throughput_gain, "replay_error": error_dict(result.error),
            "within_noise": result.within_noise}


def error_dict(e: ReplayError) -> dict[str, Any]:
    return {"noise": e.noise, "baseline": e.baseline, "spread": e.spread}


def suggestion_dict(s: Suggestion) -> dict[str, Any]:
    return {"goal": s.goal, "changes": s.changes, "replay": s.replay_note, "sim": s.sim,
            "tried": len(s.tried), "planned": s.planned, "complete": s.complete,
            "replay_error": error_dict(s.error), "within_noise": s.within_noise,
            "throughput_gain": gain(s.current.figures.input_tokens_per_s, s.best.figures.input_tokens_per_s),
            "current": s.current.figures.as_dict(), "best": s.best.figures.as_dict(),
            "settings": [{"knobs": {k: p.knobs[k] for k in ("max_wave_tokens", "min_wave_tokens", "ring")},
                          "input_tokens_per_s": p.figures.input_tokens_per_s,
                          "prefill_latency_p95_s": p.figures.prefill_latency_p95_s,
                          "pipeline_efficiency": p.figures.pipeline_efficiency} for p in s.tried]}


def suggestion_line(s: Suggestion) -> str:
    """One line: what it proposes and the predicted gain, or that nothing beats the current knobs by
    more than the replay's error; a search the time limit cut says so first, and proposes nothing."""
    searched = f"{len(s.tried)} of {s.planned} settings"
    noisy = f"; {s.within_noise} within noise of them" if s.within_noise else ""
    if not s.complete:
        lead = (f"goal {s.goal}: partial search - {searched} tried before the time limit{noisy}; "
                f"nothing is proposed until the search finishes (continue it, or give it longer)")
        best = "" if not s.changes else \
            f"; best so far: {', '.join(f'{k}={v}' for k, v in s.changes.items())} ({_gains(s)})"
        return lead + best
    if not s.changes:
        return (f"goal {s.goal}: keep the current knobs - no setting of the {searched} tried beats them by more "
                f"than the replay's error (±{s.error.noise:.1%}){noisy}")
    change = ", ".join(f"{k}={v}" for k, v in s.changes.items())
    return (f"goal {s.goal}: set {change} - predicted {_gains(s)} "
            f"(best of {searched}; replay error ±{s.error.noise:.1%})")


def _gains(s: Suggestion) -> str:
    tput = gain(s.current.figures.input_tokens_per_s, s.best.figures.input_tokens_per_s)
    p95 = gain(s.current.figures.prefill_latency_p95_s, s.best.figures.prefill_latency_p95_s)
    return f"input throughput {fmt(tput, '+.1%')}, p95 prefill {fmt(p95, '+.1%')}"
