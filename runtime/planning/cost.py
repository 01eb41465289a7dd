"""Cost-aware wave budget (beyond the paper, whose MPU counts waves of tokens and never asks what they
cost): the budget under which the pipeline is predicted to compute most, from the stages' step times.

The pipeline model. The admitted requests are the work in the system: ``X`` new tokens in all, ``x``
a request on average. At a candidate budget ``b`` the planner packs the work it is about to plan -
the first wave the largest budget ``M`` would take - into first-come-first-served waves of ``b``
and prices them with the step model (the slowest stage's seconds, :meth:`StepTimes.predict`):
``rate(b)`` tokens a second while the stages are busy, ``n(b)`` tokens a wave. How busy the stages
stay depends on how many waves the work in the system makes, ``m = X / n(b)``: a request needs
``k = max(1, x / n(b))`` waves of its own, and its successor - the next request of a closed loop, or
of a steady stream - comes only after its last wave left the last stage, ``P - 1`` steps after it
left the first. As in the machine-repair model (``m`` waves of ``k``-wave jobs, each job ``P - 1``
steps away once done), each stage is then busy a fraction ::

    u(b) = min(1, m / (k + P - 1))

of the time, and the pipeline computes ``rate(b) * u(b)`` tokens a second. One request alone
(``m = k``) gives the fill and drain of a single prompt, ``k / (k + P - 1)``. The budget is the candidate
of MPU's ladder (``M``, ``M/2``, ... down to one block) that maximizes it: a larger wave costs less a
token (its fixed part is paid once), a smaller one keeps more stages busy when little work is in the
system. Candidates that pack the work alike are one choice (the current budget stays when it is among
the best); MPU's hysteresis then applies to the proposals.

The ladder is scanned from the smallest candidate at or above ``max(X / P, x)`` down (:func:`level_cap`): a
wave larger than the work in the system spread over the stages leaves fewer waves than stages, and in a closed
loop that persists. A request returns in the group its wave finished in, and a wave takes every admitted
request up to the budget, so with little work in the system (``X < P * M``) one wave can take what P waves
should share, and the groups drift apart. Measured on the simulated GLM-5.2 / B300, PP4 (the autopilot's
phased trace, ``scripts/bench_autopilot.py``): 32 clients asking 2,048-token questions about cached 96K
documents at ``M`` = 32768 ran waves of 2,048, 6,144, 16,384, 18,432 and 22,528 tokens in turn, stage 0
busy 84 %, 1.50-1.59M input tok/s, where ``M`` = 16384 kept eight-request waves at 1.82-1.89M. The occupancy
model cannot see it: it prices the waves the work left to plan makes - the trickle of returning requests - not
the ones the circulating work forms. Below ``x`` the cap does not go: how finely one request is cut is its
own fill and drain, which the model prices.

The chosen budget is then spread (:meth:`CostPlanner.spread`): the work in the system is packed into
``max(X / b, P + 1)`` equal waves where those hold at least ``b_min`` tokens and two requests each. Equal,
because a closed loop keeps its groups: packing whole requests up to ``b`` leaves a remainder that returns
as a wave of its own, round after round. ``P + 1``, because with exactly P waves circulating the group a wave
returns is due at stage 0 the moment stage 0 finishes the wave before it: any delay on its way back (the
completion, the client, admission) idles stage 0 or sends a fragment into the slot. The occupancy model
counts ``P`` waves as enough (it has no return delay); one wave of slack is what keeps stage 0 fed.
Measured on the simulated Kimi-K3 / B300, PP4, ``reuse90`` 8K-token prompts, 64 clients (the Kimi-K3 grid's
setting, 256 requests): waves of 18, 18, 17 and 11 requests at 16384 circulated, pipeline efficiency 0.80,
344K input tok/s (TensorRT-LLM's PP loop: 365K in 8K micro-batches); spread over five waves of 11 to 14
requests, small waves held (``runtime.mechanisms.iteration`` ``FillToMinimum``), 0.87 and 365K. Where the
requests are alike and P divides them the budget's own packing was already even, and the spread costs a
remainder: 32 clients asking 2,048-token questions about cached 96K documents (GLM-5.2 / B300) ran four waves
of 8, and run waves of 7 with the rest in waves of one and two, 1.206M -> 1.195M input tok/s.

Where MPU differs: it asks for ``S = R + (F - 1) * P`` waves of *unscheduled* work and never goes below
``b_min``. A few short requests then make one wave that crosses the stages one after another (a
pipeline a quarter busy at P = 4), and many long ones get waves half the size the stages run best.
Packing keeps MPU's rule against small fragments: a chunk that does not finish its request is at least
``min(b, max(b_min, b / 2))`` tokens.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence

from wavepp.runtime.planning.planner import (
    MpuBudget,
    MpuPlanner,
    Position,
    WavePlan,
    budget_candidates,
    pack_fcfs,
    scheduled,
)
from wavepp.runtime.planning.step_times import StepTimes
from wavepp.runtime.request import AdmittedRequest, Chunk, cdiv


def occupancy(work: float, mean: float, wave_tokens: float, num_stages: int) -> float:
    """The share of time each stage is busy when the work in the system (``work`` tokens, ``mean`` a
    request) circulates in waves of ``wave_tokens``: ``min(1, m / (k + P - 1))``."""
    m = work / wave_tokens
    k = max(1.0, mean / wave_tokens)
    return min(1.0, m / (k + num_stages - 1))


def load(admitted: Sequence[AdmittedRequest]) -> tuple[float, float]:
    """The work in the system: new tokens of the admitted requests (``X``), and a request's on average (``x``)."""
    live = [a.request.num_tokens - a.reused_tokens for a in admitted if a.request.num_tokens > a.reused_tokens]
    work = float(sum(live))
    return work, work / max(1, len(live))


def level_cap(ladder: Sequence[int], work: float, mean: float, num_stages: int) -> int:
    """The largest budget worth pricing (module docstring): the smallest of ``ladder`` (largest first) at or
    above ``max(work / P, mean)``, the largest when none is."""
    level = max(work / num_stages, mean)
    return min((b for b in ladder if b >= level), default=ladder[0])


def fcfs_waves(admitted: Sequence[AdmittedRequest], budget: int, min_fragment: int, block_size: int,
               position: Position, tokens: int) -> list[list[Chunk]]:
    """Successive waves :func:`~runtime.planning.planner.pack_fcfs` would plan at ``budget`` until they carry
    ``tokens`` (or the work runs out), on copies of the requests: nothing is scheduled."""
    todo: list[AdmittedRequest] = []
    ahead = 0
    for a in admitted:                       # the head of the line covers the tokens, and one more request
        if a.remaining > 0:
            todo.append(copy.copy(a))
            ahead += a.remaining
            if ahead > tokens:
                break
    waves: list[list[Chunk]] = []
    done = 0
    while done < tokens and todo:
        chunks = pack_fcfs(todo, budget, min_fragment, block_size, position)
        if not chunks:
            break
        waves.append(chunks)
        by_id = {a.id: a for a in todo}
        for c in chunks:
            by_id[c.request_id].scheduled += c.length
            done += c.length
        todo = [a for a in todo if a.remaining > 0]
    return waves


class CostPlanner(MpuPlanner):
    """The budget from the pipeline model (module docstring), FCFS packing; MPU's own plan until the
    stages' step times can be predicted (a real engine learns them online)."""

    def __init__(self, budget: MpuBudget, min_tokens: int, block_size: int, times: StepTimes, num_stages: int,
                 position: Position = scheduled) -> None:
        super().__init__(budget, min_tokens, block_size, position)
        self.times = times
        self.num_stages = num_stages
        self.ladder = budget_candidates(budget.candidates[0], block_size, block_size)

    def min_fragment(self, budget: int) -> int:
        return min(budget, max(self.min_tokens, budget // 2))

    def throughput(self, admitted: Sequence[AdmittedRequest], budget: int, window: int, work: float,
                   mean: float) -> tuple[float, float, tuple[int, float]] | None:
        """Predicted (tokens a second, while busy; with the stages' occupancy; the packing's signature)
        of ``window`` tokens of the next work planned at ``budget``."""
        waves = fcfs_waves(admitted, budget, self.min_fragment(budget), self.block_size, self.position, window)
        if not waves:
            return None
        tokens = sum(c.length for w in waves for c in w)
        seconds = sum(self.times.predict([(c.start, c.length) for c in w]) for w in waves)
        rate = tokens / seconds
        return rate, rate * occupancy(work, mean, tokens / len(waves), self.num_stages), (len(waves), seconds)

    def propose(self, admitted: Sequence[AdmittedRequest], work_mean: tuple[float, float] | None = None) -> int:
        """The candidate budget of the highest predicted throughput. Scanned from :func:`level_cap` down; a
        candidate that packs the work as the one before it joins its group; the scan stops where even
        busy stages could not beat the best (a smaller wave only adds its fixed cost)."""
        work, mean = work_mean or load(admitted)
        top = self.ladder[0]
        window = sum(c.length for c in pack_fcfs(admitted, top, self.min_fragment(top), self.block_size,
                                                 self.position))
        cap = level_cap(self.ladder, work, mean, self.num_stages)
        best, best_thr = (cap, cap), -1.0      # the best group of candidates: (largest, smallest)
        group: tuple[int, int] | None = None
        last: tuple[int, float] | None = None
        for b in self.ladder:
            if b > cap:
                continue
            found = self.throughput(admitted, b, window, work, mean)
            if found is None:
                continue
            rate, thr, packing = found
            if group is not None and packing == last:       # the same waves as the larger budget
                if best == group:
                    best = (group[0], b)
                group = (group[0], b)
                continue
            last, group = packing, (b, b)
            if thr > best_thr:
                best, best_thr = group, thr
            if rate < best_thr:
                break
        high, low = best
        current = self.budget.current
        if current is not None and low <= current <= high:
            return current
        return low if current is not None and current < low else high

    def spread(self, admitted: Sequence[AdmittedRequest], budget: int,
               work_mean: tuple[float, float] | None = None) -> int:
        """The tokens a wave packs at ``budget``: the work in the system spread evenly over
        ``max(X / budget, P + 1)`` waves of whole requests (module docstring), where those waves are at
        least ``b_min`` tokens and two requests on average; else the budget itself."""
        work, mean = work_mean or load(admitted)
        waves = max(math.ceil(work / budget), self.num_stages + 1)
        size = work / waves
        if size < self.min_tokens or size < 2 * mean:
            return budget
        # Whole requests: a wave stops short of its size by up to one request, so each gets one more.
        return min(budget, cdiv(math.ceil(size + mean), self.block_size) * self.block_size)

    def plan(self, admitted: Sequence[AdmittedRequest]) -> WavePlan | None:
        if not self.times.can_predict:
            return super().plan(admitted)
        remaining = [a.remaining for a in admitted if a.remaining > 0]
        if not remaining:
            return None
        work_mean = load(admitted)
        b = self.budget.settle(self.propose(admitted, work_mean))
        w = self.spread(admitted, b, work_mean)
        chunks = pack_fcfs(admitted, w, self.min_fragment(w), self.block_size, self.position)
        return WavePlan(chunks, b, self.budget.waves_available(b, remaining)) if chunks else None
