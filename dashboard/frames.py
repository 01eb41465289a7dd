"""Spans (compact form) -> tables the pages draw. Pure functions: no Streamlit here.

Times are seconds since the view's origin (the first span), so saved runs, live runs and the
virtual-time sim all plot on the same kind of axis.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from wavepp.runtime.figures.idle_causes import IdleInterval
from wavepp.runtime.figures.report import admitted_event
from wavepp.telemetry import names as N

Span = dict[str, Any]
STEP_KINDS = {N.MATERIALIZE: "materialize", N.EXECUTE: "execute", N.SEND: "send", N.STAGE_WAIT: "wait"}
PHASES = {N.HINT_LOOKUP: "lookup", N.LEASE: "lease", N.ESCROW: "escrow"}


@dataclass(slots=True)
class Frames:
    origin_ns: int
    num_stages: int
    steps: pd.DataFrame          # stage, kind, t0, t1, wave, tokens
    requests: pd.DataFrame       # id, arrival, admitted, done, latency, input/reused/reusable tokens, fallbacks,
                                 # failed, follows (the producer a follower read its prefix from, or "")
    rounds: pd.DataFrame         # t, round_s, lookup_s, lease_s, escrow_s, requests, admitted
    plans: pd.DataFrame          # t, wave, budget, tokens, ready, in_flight
    fallbacks: pd.DataFrame      # t, request, stage (late ones have a stage)
    knob_marks: list[tuple[float, str]] = field(default_factory=list)   # (t, "name=value, …")

    def t(self, ns: int | float | None) -> float:
        return ((ns or 0) - self.origin_ns) / 1e9

    @property
    def start(self) -> float:
        """The run's first arrival (the makespan's start; 0 when no request span has arrived)."""
        return float(self.requests["arrival"].min()) if len(self.requests) else 0.0

    @property
    def end(self) -> float:
        """The run's newest moment: its last step, completion or knob change (the makespan ends at
        the last completion, after the last execute step; a knob change just made on a live run
        belongs in the detail window, which ends here)."""
        ends = [float(self.steps["t1"].max()) if len(self.steps) else 0.0]
        if len(self.requests):
            ends.append(float(self.requests["done"].max()))
        ends += [t for t, _ in self.knob_marks]
        return max(ends)


def _a(span: Span, key: str, default: Any = 0) -> Any:
    return span["a"].get(key, default)


def shown_ids(ids: Sequence[str], shown: int = 4) -> str:
    return ", ".join(ids[:shown]) + (f" … ({len(ids)} in all)" if len(ids) > shown else "")


# Column -> dtype of each table, fixed so that tables extended chunk by chunk equal one built at
# once (pandas would infer a column of Nones in one chunk as object, in another as float).
STEP_COLUMNS = {"stage": "int64", "kind": "object", "t0": "float64", "t1": "float64", "wave": "int64",
                "tokens": "int64"}
REQUEST_COLUMNS = {"id": "object", "arrival": "float64", "admitted": "float64", "done": "float64",
                   "latency": "float64", "input_tokens": "int64", "reused": "int64", "reusable": "int64",
                   "fallbacks": "int64", "failed": "bool", "follows": "object"}
ROUND_COLUMNS = {"t": "float64", "round_s": "float64", "lookup_s": "float64", "lease_s": "float64",
                 "escrow_s": "float64", "requests": "int64", "admitted": "int64"}
PLAN_COLUMNS = {"t": "float64", "wave": "int64", "budget": "int64", "tokens": "int64", "ready": "float64",
                "in_flight": "int64", "requests": "object"}          # requests: the ids the wave carries (a tuple)
FALLBACK_COLUMNS = {"t": "float64", "request": "object", "stage": "float64"}   # NaN: an early fallback


def _frame(rows: Sequence[Any], dtypes: dict[str, str]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=list(dtypes)).astype(dtypes)


class _Table:
    """Rows appended over time; the DataFrame is extended by the new rows only (never rebuilt)."""

    def __init__(self, dtypes: dict[str, str]) -> None:
        self.dtypes = dtypes
        self.rows: list[tuple[Any, ...]] = []
        self._frame = _frame([], dtypes)
        self._framed = 0                                   # rows already in _frame

    def keep(self, row_ok: Any) -> None:
        """Drop the rows ``row_ok`` refuses (the frame is made again from the rest when next asked)."""
        self.rows = [r for r in self.rows if row_ok(r)]
        self._frame = _frame([], self.dtypes)
        self._framed = 0

    def frame(self) -> pd.DataFrame:
        if self._framed < len(self.rows):
            new = _frame(self.rows[self._framed:], self.dtypes)
            self._frame = new if self._framed == 0 else pd.concat([self._frame, new], ignore_index=True)
            self._framed = len(self.rows)
        return self._frame


class FrameBuilder:
    """The tables of one run, derived span by span: :meth:`add` appends what new spans say to what
    is already derived, so a live view that moved by a few spans costs those spans, not the run.

    The origin (t = 0) is fixed when the builder is made; a span that starts before it cannot be
    appended (:meth:`can_add` says so) and the caller builds afresh. Knob changes come from the
    ``wavepp.knobs.changed`` events the runtime puts on the plan span of the first wave under new
    knobs, so markers sit on the run's own clock."""

    def __init__(self, origin_ns: int, num_stages: int | None = None) -> None:
        self.origin_ns = origin_ns
        self.num_stages = num_stages
        self.steps = _Table(STEP_COLUMNS)
        self.requests = _Table(REQUEST_COLUMNS)
        self.plans = _Table(PLAN_COLUMNS)
        self.fallbacks = _Table(FALLBACK_COLUMNS)
        self.marks: list[tuple[float, str]] = []
        self._rounds: dict[str, dict[str, Any]] = {}      # round span id -> its row (span order)
        self._phases: dict[str, dict[str, float]] = {}    # round span id -> phase -> seconds (last wins)
        self._rounds_frame: pd.DataFrame | None = None    # None: rounds or phases changed since it was made
        self._max_stage = -1
        self.count = 0                                     # spans added

    def can_add(self, spans: Sequence[Span]) -> bool:
        return all(s["t0"] >= self.origin_ns for s in spans)

    @property
    def num_steps(self) -> int:
        return len(self.steps.rows)

    def trim(self, cut: float) -> None:
        """Forget what ended before ``cut`` (seconds since the origin): a live view keeps the recent
        part of a run it cannot hold whole (its tables then start there)."""
        self.steps.keep(lambda r: r[3] >= cut)
        self.requests.keep(lambda r: r[3] >= cut)
        self.plans.keep(lambda r: r[0] >= cut)
        self.fallbacks.keep(lambda r: r[0] >= cut)
        dropped = {rid for rid, row in self._rounds.items() if row["t"] < cut}
        self._rounds = {rid: row for rid, row in self._rounds.items() if rid not in dropped}
        self._phases = {rid: p for rid, p in self._phases.items() if rid not in dropped}
        self._rounds_frame = None

    def _t(self, ns: int | None) -> float:
        return ((ns or 0) - self.origin_ns) / 1e9

    def add(self, spans: Sequence[Span]) -> FrameBuilder:
        t = self._t
        for s in spans:
            name = s["n"]
            if name in STEP_KINDS:
                stage = int(_a(s, N.STAGE))
                self._max_stage = max(self._max_stage, stage)
                self.steps.rows.append((stage, STEP_KINDS[name], t(s["t0"]), t(s["t1"]), int(_a(s, N.WAVE_ID, -1)),
                                        int(_a(s, N.TOKENS))))
            elif name == N.REQUEST:
                admitted = admitted_event(s)
                self.requests.rows.append((
                    _a(s, N.REQUEST_ID, ""), t(s["t0"]), t(admitted) if admitted else None, t(s["t1"]),
                    (s["t1"] - s["t0"]) / 1e9, int(_a(s, N.GEN_AI_INPUT_TOKENS)), int(_a(s, N.REUSED_TOKENS)),
                    int(_a(s, N.REUSABLE_TOKENS)), int(_a(s, N.FALLBACKS)), "err" in s, _a(s, N.FOLLOWS, "")))
                for ev in s.get("ev", ()):
                    if ev[0] == N.EVENT_FALLBACK:
                        self.fallbacks.rows.append((t(ev[1]), _a(s, N.REQUEST_ID, ""), ev[2].get(N.STAGE)))
            elif name == N.ADMISSION_ROUND:
                self._rounds[s["id"]] = {"t": t(s["t1"]), "round_s": (s["t1"] - s["t0"]) / 1e9,
                                         "requests": int(_a(s, N.NUM_REQUESTS)), "admitted": int(_a(s, N.NUM_ADMITTED))}
                self._rounds_frame = None
            elif name in PHASES:
                self._phases.setdefault(s.get("p", ""), {})[f"{PHASES[name]}_s"] = (s["t1"] - s["t0"]) / 1e9
                self._rounds_frame = None
            elif name == N.WAVE_PLAN:
                for ev in s.get("ev", ()):
                    if ev[0] == N.EVENT_KNOBS:
                        changed = {k.removeprefix("wavepp.knobs."): v for k, v in ev[2].items()
                                   if k != N.KNOBS_CHANGED}
                        self.marks.append((t(ev[1]), ", ".join(f"{k}={v}" for k, v in changed.items())))
                if _a(s, N.TOKENS) > 0:
                    self.plans.rows.append((t(s["t0"]), int(_a(s, N.WAVE_ID, -1)), int(_a(s, N.BUDGET)),
                                            int(_a(s, N.TOKENS)), float(_a(s, N.NUM_WAVES_READY, 0.0)),
                                            int(_a(s, N.NUM_IN_FLIGHT)), tuple(_a(s, N.REQUEST_IDS, ()))))
        self.count += len(spans)
        return self

    def _rounds_table(self) -> pd.DataFrame:
        if self._rounds_frame is None:
            rows = [row | self._phases.get(rid, {}) for rid, row in self._rounds.items()]
            self._rounds_frame = _frame(rows, ROUND_COLUMNS).fillna(0.0)
        return self._rounds_frame

    def frames(self) -> Frames:
        stages = self.num_stages if self.num_stages is not None else self._max_stage + 1
        return Frames(self.origin_ns, stages, self.steps.frame(), self.requests.frame(), self._rounds_table(),
                      self.plans.frame(), self.fallbacks.frame(), list(self.marks))


def build(spans: Sequence[Span], num_stages: int | None = None, origin_ns: int | None = None) -> Frames:
    """Tables of one run (origin: the first span's start unless given)."""
    origin = origin_ns if origin_ns is not None else min((s["t0"] for s in spans), default=0)
    return FrameBuilder(origin, num_stages).add(spans).frames()


def idle_window(intervals: Sequence[IdleInterval], origin_ns: int, start: float, end: float,
                live: bool = False) -> pd.DataFrame:
    """The run's idle intervals (:mod:`runtime.figures.idle_causes`, the one split) inside ``[start, end]``
    (seconds since ``origin_ns``), clipped to it. Columns: stage, t0, t1, cause, wave.

    ``live``: after a stage's last *finished* step the stage may well be computing - its span has
    not ended yet - so that stretch (``drain``) is not idle time to show."""
    lo, hi = origin_ns + int(start * 1e9), origin_ns + int(end * 1e9)
    rows = [(iv.stage, (max(iv.t0, lo) - origin_ns) / 1e9, (min(iv.t1, hi) - origin_ns) / 1e9, iv.cause, iv.wave)
            for iv in intervals if iv.t1 > lo and iv.t0 < hi and not (live and iv.cause == "drain")]
    return _frame(rows, {"stage": "int64", "t0": "float64", "t1": "float64", "cause": "object", "wave": "int64"})


def idle_shares(idle: pd.DataFrame, num_stages: int, length: float) -> pd.DataFrame:
    """Per stage and cause, the share of a window of ``length`` seconds the stage was idle for it."""
    if idle.empty or length <= 0:
        return pd.DataFrame(columns=["stage", "cause", "share"])
    shares = idle.assign(share=(idle["t1"] - idle["t0"]) / length)
    df = shares.groupby(["stage", "cause"], as_index=False)["share"].sum()
    return df[df["stage"] < num_stages]


def stage_idle(shares: pd.DataFrame, num_stages: int) -> list[float]:
    """Per stage, the share of the window it was idle: the sum of its causes (:func:`idle_shares`),
    so a stage's bubble tile, its bars in the cause chart and the reading are one figure."""
    per_stage = shares.groupby("stage")["share"].sum() if not shares.empty else pd.Series(dtype=float)
    return [float(per_stage.get(s, 0.0)) for s in range(num_stages)]


def busy_bins(steps: pd.DataFrame, num_stages: int, start: float, end: float, bins: int) -> np.ndarray:
    """Per stage, the share of each of ``bins`` equal bins of ``[start, end]`` it spent executing:
    shape (num_stages, bins). The whole run at a chart's resolution - one value per pixel column
    instead of one bar per step (tens of thousands of bars cost seconds to draw on every redraw)."""
    edges = np.linspace(start, end, bins + 1)
    width = max((end - start) / bins, 1e-12)
    out = np.zeros((num_stages, bins))
    ex = steps[steps["kind"] == "execute"]
    for s in range(num_stages):
        mine = ex[ex["stage"] == s].sort_values("t0")
        if mine.empty:
            continue
        t1 = np.maximum.accumulate(mine["t1"].to_numpy())                 # busy until
        t0 = np.maximum(mine["t0"].to_numpy(), np.r_[-np.inf, t1[:-1]])   # an overlap counted once
        dur = np.clip(t1 - t0, 0, None)
        before = np.r_[0.0, np.cumsum(dur)]                 # busy time of the first i steps
        i = np.searchsorted(t1, edges, side="right")        # steps over by each edge
        k = np.minimum(i, len(t0) - 1)                      # the step an edge may fall in
        inside = np.where(i < len(t0), np.clip(edges - t0[k], 0, dur[k]), 0.0)
        out[s] = np.diff(before[i] + inside) / width
    return np.clip(out, 0.0, 1.0)


def busy_over_time(steps: pd.DataFrame, num_stages: int, window: float, points: int = 120,
                   end: float | None = None) -> pd.DataFrame:
    """Per stage, the busy fraction of a sliding window (1 - bubble fraction), and the pipeline
    efficiency (busiest stage) - the figures of DESIGN §7 over time, sampled up to ``end`` (the
    run's end, its last completion; by default the last execute step)."""
    ex = steps[steps["kind"] == "execute"]
    if ex.empty or window <= 0:
        return pd.DataFrame(columns=["t", "stage", "busy"])
    end = float(ex["t1"].max()) if end is None else end
    ts = [end * (i + 1) / points for i in range(points)]
    rows = []
    for s in range(num_stages):
        mine = ex[ex["stage"] == s]
        t0, t1 = mine["t0"].to_numpy(), mine["t1"].to_numpy()
        for t in ts:
            lo = max(0.0, t - window)
            overlap = (t1.clip(lo, t) - t0.clip(lo, t)).clip(0).sum()
            rows.append((t, f"stage {s}", overlap / max(t - lo, 1e-12)))
    df = pd.DataFrame(rows, columns=["t", "stage", "busy"])
    eff = df.groupby("t")["busy"].max().reset_index().assign(stage="pipeline efficiency")
    return pd.concat([df, eff], ignore_index=True)


def min_samples(q: float) -> int:
    """The fewest samples a p``q`` stands on: one sample beyond it (p50: 2, p95: 20, p99: 100)."""
    return math.ceil(100 / (100 - q)) if q < 100 else 1


def percentiles_by_bin(times: pd.Series, values: pd.Series, edges: Sequence[float],
                       qs: Sequence[float] = (50, 95, 99)) -> pd.DataFrame:
    """Per bin ``(lo, hi]`` of ``times``, the percentiles of ``values`` - only where the bin holds
    ``min_samples(q)`` samples; elsewhere NaN, so a line breaks there instead of joining across
    empty or thin bins. Columns: t (the bin's end), percentile ("p50" …), value."""
    rows = []
    for lo, hi in zip(edges[:-1], edges[1:], strict=True):
        mine = values[(times > lo) & (times <= hi)].to_numpy()
        for q in qs:
            value = float(np.percentile(mine, q)) if len(mine) >= min_samples(q) else math.nan
            rows.append((hi, f"p{q:g}", value))
    return pd.DataFrame(rows, columns=["t", "percentile", "value"])


def warmed_up(fr: Frames) -> float:
    """When the pipeline first held work on every stage (seconds since the origin): each stage's first
    execute step has started; the run's start when a stage never ran one."""
    ex = fr.steps[fr.steps["kind"] == "execute"]
    firsts = ex.groupby("stage")["t0"].min()
    return float(firsts.max()) if len(firsts) == fr.num_stages else fr.start


def window_figures(fr: Frames, idle: pd.DataFrame, a: float, b: float) -> dict[str, Any]:
    """The run's figures over ``[a, b]`` (seconds since the origin), as the pages name them:
    requests completed in the window, idle time inside it, admitting rounds ending in it. Counts
    come with their rate (``waves_per_s``): windows of different lengths compare by rate.
    ``idle``: :func:`idle_window` over the same window (idle causes, summed over stages)."""
    length = max(b - a, 1e-12)
    done = fr.requests[(fr.requests["done"] > a) & (fr.requests["done"] <= b) & ~fr.requests["failed"]]
    bubbles = stage_idle(idle_shares(idle, fr.num_stages, length), fr.num_stages)   # as the Pipeline page's
    rounds = fr.rounds[(fr.rounds["admitted"] > 0) & (fr.rounds["t"] > a) & (fr.rounds["t"] <= b)]["t"].sort_values()
    gaps = rounds.diff().dropna().to_numpy()
    plans = fr.plans[(fr.plans["t"] > a) & (fr.plans["t"] <= b)]
    latency = done["latency"].to_numpy()

    def pct(values: Any, q: float) -> float | None:
        return float(np.percentile(values, q)) if len(values) >= min_samples(q) else None
    out: dict[str, Any] = {
        "window_s": length,
        "input_tokens_per_s": float(done["input_tokens"].sum()) / length,
        "pipeline_efficiency": 1 - min(bubbles, default=1.0),
        "bubble_fraction": bubbles,
        "prefill_latency_p50_s": pct(latency, 50), "prefill_latency_p95_s": pct(latency, 95),
        "admission_interval_p50_s": pct(gaps, 50),
        "completed": len(done), "waves": len(plans), "waves_per_s": len(plans) / length,
        "mean_wave_tokens": float(plans["tokens"].mean()) if len(plans) else None,
        "budget": float(plans["budget"].median()) if len(plans) else None,
    }
    stage_time = length * max(fr.num_stages, 1)
    out["idle_causes"] = ({c: float(v) / stage_time for c, v in
                           (idle["t1"] - idle["t0"]).groupby(idle["cause"]).sum().items()} if len(idle) else {})
    return out


def request_waterfall(fr: Frames, request_id: str) -> pd.DataFrame | None:
    """One request's way through the run, as rows (row, kind, t0, t1, detail) - queued until its
    admission round, the round's lookup / lease / escrow, each chunk's materialize / execute /
    send on every stage (the waves that carried it), and the whole prefill - or None when the run
    has no request of that id."""
    mine = fr.requests[fr.requests["id"] == request_id]
    if mine.empty:
        return None
    req = mine.iloc[0]
    rows: list[tuple[str, str, float, float, str]] = [
        ("prefill", "prefill", req["arrival"], req["done"], f"{req['latency']:.4f} s, "
                                                              f"{'failed' if req['failed'] else 'completed'}")]
    admitted = req["admitted"]
    if not math.isnan(admitted):
        rows.append(("queued", "queued", req["arrival"], admitted, "arrival -> admitted"))
        ends = fr.rounds[fr.rounds["t"] >= admitted - 1e-9].sort_values("t")
        if len(ends):
            r = ends.iloc[0]
            t = r["t"] - r["round_s"]
            for phase in ("lookup", "lease", "escrow"):
                dur = float(r[f"{phase}_s"])
                rows.append(("admission round", phase, t, t + dur, f"{phase} {dur * 1e3:.3f} ms "
                             f"(round of {int(r['requests'])} requests, {int(r['admitted'])} admitted)"))
                t += dur
    waves = {int(w) for w, ids in zip(fr.plans["wave"], fr.plans["requests"], strict=True) if request_id in ids}
    steps = fr.steps[fr.steps["wave"].isin(waves)].sort_values("t0")
    for stage, kind, t0, t1, wave, tokens in steps.itertuples(index=False):
        rows.append((f"stage {stage}", str(kind), t0, t1, f"wave {wave} ({tokens} tokens in the wave)"))
    # Admitted and not computing on stage 0: the time the request waited for a wave to carry its
    # next chunk (the planner's budget, the ring, other requests' waves) - most of a long request's
    # prefill under load, which no step covers.
    first = steps[steps["stage"] == 0]
    cursor = admitted if not math.isnan(admitted) else req["arrival"]
    for t0, t1 in zip(first["t0"], first["t1"], strict=True):
        if t0 > cursor:
            rows.append(("stage 0", "waiting for a wave", cursor, t0, "admitted; no wave carried its next chunk yet"))
        cursor = max(cursor, t1)
    # Seconds since the request arrived: the chart reads as the request's own clock.
    out = pd.DataFrame(rows, columns=["row", "kind", "t0", "t1", "detail"])
    return out.assign(t0=out["t0"] - req["arrival"], t1=out["t1"] - req["arrival"])
