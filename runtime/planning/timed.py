"""Time-equalized packing (:class:`TimedPlanner`, beyond the paper: its stated limit is that the
budget counts tokens, not time): the same MPU budget ``b``, but spent in *time* - every wave may
take what ``b`` tokens of the admitted work take on average on the bottleneck stage, by its fitted
``t(L, x)`` (:mod:`runtime.planning.step_times`, :func:`bottleneck`). A chunk deep in a long context
costs more per token, so it gets fewer tokens and a chunk near its start more: waves over long
prompts take equal time instead of growing longer and longer, in about as many waves as MPU's.
Equal times pay only near a drain (:func:`time_pays`: the flow-shop makespan), so in a long stream
the waves are MPU's token waves.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from wavepp.runtime.planning.planner import (
    MpuBudget,
    MpuPlanner,
    Position,
    Waiting,
    WavePlan,
    align_down,
    nothing_waiting,
    pack_fcfs,
    scheduled,
)
from wavepp.runtime.planning.step_times import StageFit, StepTimes
from wavepp.runtime.request import AdmittedRequest, Chunk, Request


def span_time(fit: StageFit, start: int, tokens: int, budget: int) -> float:
    """Predicted seconds of ``tokens`` new tokens from context ``start`` computed in chunks of
    ``budget`` (the last one the rest), without the waves' own cost ``c``: each chunk pays its fixed
    part and its context again. The chunk time is linear in the context at a fixed length, so the
    ``k`` whole chunks cost ``k`` chunks at their mean context - O(1)."""
    k, rest = divmod(tokens, budget)
    total = k * fit.chunk_time(start + (k - 1) * budget // 2, budget) if k else 0.0
    return total + (fit.chunk_time(start + k * budget, rest) if rest else 0.0)


def bottleneck(admitted: Sequence[AdmittedRequest], fits: Sequence[StageFit],
               budget: int) -> tuple[int, float] | None:
    """The stage the admitted work costs most, and what a token of that work costs there on
    average in chunks of ``budget``: each request's cost a token over the span it computes (its
    reused prefix to its end, :func:`span_time`), weighted by the tokens it has left::

        tau_s = sum_i r_i * span_time_s(p_i, N_i - p_i) / (N_i - p_i)  /  sum_i r_i

    A request's own span fixes its mean, so it does not move while the request is computed.
    ``None``: nothing left to compute."""
    spans = [(a.remaining, a.reused_tokens, a.request.num_tokens - a.reused_tokens) for a in admitted
             if a.remaining > 0 and a.request.num_tokens > a.reused_tokens]
    weight = sum(r for r, _, _ in spans)
    if not weight:
        return None
    taus = [sum(r * span_time(f, p, n, budget) / n for r, p, n in spans) / weight for f in fits]
    stage = max(range(len(fits)), key=taus.__getitem__)
    return stage, taus[stage]


def pack_timed(admitted: Sequence[AdmittedRequest], limit: float, min_fragment: int, block_size: int,
               fit: StageFit) -> list[Chunk]:
    """Fill one wave first-come-first-served in time: on the stage of ``fit`` the wave's predicted
    time ``c + sum chunk_time(L_i, x_i)`` stays within ``limit``. A request takes its whole
    remainder when that fits; otherwise the longest block-aligned cut that fits, when it takes at
    least what ``min_fragment`` new tokens after no context take (no small fragment in a leftover),
    or when the wave would otherwise be empty (it always makes progress)."""
    used = fit.c
    floor = fit.chunk_time(0, min_fragment)
    chunks: list[Chunk] = []
    for a in admitted:
        left = a.remaining
        if left <= 0:
            continue
        L = a.scheduled
        if used + fit.chunk_time(L, left) <= limit:
            take = left
        else:
            lo, hi = 0, (align_down(L + left, block_size) - L) // block_size + 1   # cut ends at L' = L + n blocks
            while hi - lo > 1:                  # the largest n whose cut fits (cost rises with x)
                mid = (lo + hi) // 2
                if used + fit.chunk_time(L, align_down(L, block_size) + mid * block_size - L) <= limit:
                    lo = mid
                else:
                    hi = mid
            take = align_down(L, block_size) + lo * block_size - L
            if take <= 0 and not chunks:
                take = min(left, align_down(L, block_size) + block_size - L)   # at least a block
            if take <= 0 or (chunks and fit.chunk_time(L, take) < floor):
                break
        chunks.append(Chunk(a.id, L, take, a.reuse_blocks, L + take == a.request.num_tokens, a.attempt,
                            a.request.tokens))
        used += fit.chunk_time(L, take)
        if take < left:
            break                               # the wave is full in time
    return chunks


def fit_tokens(fit: StageFit, context: int, seconds: float) -> float:
    """The most new tokens a chunk after ``context`` computes within ``seconds`` (0 when even an
    empty chunk takes longer): the root of the chunk time, quadratic in its length."""
    k = fit.chunk_time(context, 0) - seconds
    if k >= 0:
        return 0.0
    q = fit.beta + fit.alpha_lx * context
    if fit.alpha_xx <= 0:
        return -k / q if q > 0 else float("inf")
    return (math.sqrt(q * q - 4 * fit.alpha_xx * k) - q) / (2 * fit.alpha_xx)


def token_waves(fit: StageFit, start: int, tokens: int, budget: int) -> tuple[float, float]:
    """A span of ``tokens`` from context ``start`` in waves of ``budget`` tokens, alone: its predicted
    seconds, waves' own cost included, and its longest wave (the deepest whole chunk or the rest)."""
    whole, rest = divmod(tokens, budget)
    total = (whole + (rest > 0)) * fit.c + span_time(fit, start, tokens, budget)
    deepest = fit.chunk_time(start + (whole - 1) * budget, budget) if whole else 0.0
    return total, fit.c + max(deepest, fit.chunk_time(start + whole * budget, rest) if rest else 0.0)


def timed_waves(fit: StageFit, start: int, tokens: int, limit: float, block_size: int) -> float:
    """A span in waves of ``limit`` seconds, alone (each cut block-aligned, at least a block): its
    predicted seconds, waves' own cost included - what :func:`pack_timed` makes of it."""
    end, at, total = start + tokens, start, 0.0
    while at < end:
        cut = align_down(at + int(fit_tokens(fit, at, limit - fit.c)), block_size)
        nxt = min(end, max(cut, align_down(at, block_size) + block_size))
        total += fit.c + fit.chunk_time(at, nxt - at)
        at = nxt
    return total


def time_pays(admitted: Sequence[AdmittedRequest], fit: StageFit, budget: int, limit: float, longest: float,
              num_stages: int, block_size: int, waiting: Sequence[Request] = ()) -> bool:
    """Whether packing the admitted work in time shortens the pipeline's busy period, by the flow-shop
    makespan of waves that take ``T_j`` on each of ``P`` stages alike::

        makespan = sum_j T_j + (P - 1) * max_j T_j

    A wave's time only counts once more, at its maximum (the fill and drain); between them, waves of
    uneven length cost nothing, while smaller chunks deep in a context cost per chunk (each re-reads
    its context). So time pays when it lowers the period's longest wave (``longest``: planned so
    far; token waves would reach each request's deepest chunk) by more than its extra chunks cost -
    where little work fills the pipeline and its drain is near, not in a long stream. Each admitted
    request is costed alone in waves of ``budget`` tokens and of ``limit`` seconds, on the bottleneck
    ``fit``; the tokens of the requests ``waiting`` for admission belong to the same busy period (it
    drains after them), each costing what an admitted token costs more in time, at most (their reused
    prefixes are not known yet); they are counted only when time could pay at all."""
    spans = [(a.scheduled, a.remaining) for a in admitted if a.remaining > 0]
    if not spans:
        return False
    tokens = [token_waves(fit, s, r, budget) for s, r in spans]
    gain = (num_stages - 1) * (max(longest, *(w for _, w in tokens)) - max(longest, limit))
    if gain <= 0:
        return False
    work = sum(r for _, r in spans)
    scale = 1 + sum(r.num_tokens for r in waiting) / work   # the busy period's work over what is admitted
    extra = sum(timed_waves(fit, s, r, limit, block_size) - seconds
                for (s, r), (seconds, _) in zip(spans, tokens, strict=True))
    return extra * scale < gain


class TimedPlanner(MpuPlanner):
    """MPU's budget (its fill target, hysteresis), spent in time once every stage has a step-time
    fit; token packing until then (a real engine learns its fits online). Each wave may take, on
    the pipeline's bottleneck stage (:func:`bottleneck`), what ``b`` tokens of the admitted work
    take there on average, ``T = c + b * tau`` (:func:`pack_timed`): waves of one request take
    equal time from its first to its last, and the work makes about ``W / b`` waves - MPU's count,
    so no step's fixed cost is paid more often. The budget ``b`` is chosen on the work counted in
    time (each request's predicted time left, in tokens at the mean cost), so the fill target
    counts the waves that time-packing will make.

    Equal times pay only where they shorten the busy period (:func:`time_pays`): near a drain, not
    in a long stream, where MPU's token waves do the same work in fewer chunks. So each wave is
    packed in time or in tokens by that test; the busy period's longest wave is kept until nothing
    started is left in the pipeline."""

    def __init__(self, budget: MpuBudget, min_tokens: int, block_size: int, times: StepTimes, num_stages: int,
                 position: Position = scheduled, waiting: Waiting = nothing_waiting) -> None:
        super().__init__(budget, min_tokens, block_size, position)
        self.times = times
        self.num_stages = num_stages
        self.waiting = waiting
        self.longest = 0.0          # predicted seconds of the busy period's longest wave, on its bottleneck

    def plan(self, admitted: Sequence[AdmittedRequest]) -> WavePlan | None:
        if not self.times.ready:
            return super().plan(admitted)
        if all(a.scheduled == a.reused_tokens for a in admitted):
            self.longest = 0.0      # nothing started is in flight: a new busy period
        fits = self.times.stage_fits()
        guess = self.budget.current or self.budget.candidates[0]
        found = bottleneck(admitted, fits, guess)
        if found is None:
            return None
        stage, tau = found
        # MPU's fill target counted in time: what each request has left, in tokens at the mean cost.
        remaining = [span_time(fits[stage], a.scheduled, a.remaining, guess) / tau for a in admitted if a.remaining > 0]
        b = self.budget.decide(remaining)
        if b != guess:
            stage, tau = bottleneck(admitted, fits, b) or found
        fit, min_fragment = fits[stage], max(self.min_tokens, b // 2)
        limit = fit.c + b * tau
        if time_pays(admitted, fit, b, limit, self.longest, self.num_stages, self.block_size, self.waiting()):
            chunks = pack_timed(admitted, limit, min_fragment, self.block_size, fit)
        else:
            chunks = pack_fcfs(admitted, b, min_fragment, self.block_size, self.position)
        if not chunks:
            return None
        self.longest = max(self.longest, fit.step_time([(c.start, c.length) for c in chunks]))
        return WavePlan(chunks, b, self.budget.waves_available(b, remaining))
