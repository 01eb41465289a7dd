"""Whether a small wave waits for more work (``runtime.mechanisms.iteration`` ``FillToMinimum``): by hand,
and when a closed loop's remainders are planned."""

from __future__ import annotations

from dataclasses import dataclass

from wavepp.runtime.bench.runs import BenchConfig, run_one
from wavepp.runtime.engines.config import SimConfig
from wavepp.runtime.engines.sim.engine import SimEngine
from wavepp.runtime.mechanisms.iteration import FillToMinimum, NoFill
from wavepp.runtime.sources.workloads import parse_workload
from wavepp.telemetry import names as N

P, B_MIN = 4, 8192


@dataclass
class Run:
    """The questions the fill asks of the run state."""

    unscheduled: int = 900
    first_stage_backlog: int = 0
    in_flight: int = 0
    num_waiting: int = 0
    admitting: int = 0

    def unscheduled_tokens(self) -> int:
        return self.unscheduled


def waits(run: Run) -> bool:
    return FillToMinimum().should_wait(run, P, B_MIN)  # type: ignore[arg-type]


def test_a_small_wave_waits_while_stage_0_has_a_wave_after_the_one_it_runs() -> None:
    """Nothing on its way and fewer than P waves in flight, yet stage 0 will not idle before it takes its
    next wave: the remainder is planned then, with whatever arrived meanwhile."""
    assert waits(Run(first_stage_backlog=2, in_flight=2))
    assert not waits(Run(first_stage_backlog=1, in_flight=2))      # stage 0 runs its last: plan now
    assert not waits(Run(unscheduled=B_MIN, first_stage_backlog=3, in_flight=3))   # not small
    assert not waits(Run(unscheduled=0, first_stage_backlog=3, in_flight=3))       # nothing to plan


def test_with_p_waves_in_flight_a_small_wave_waits_only_for_work_on_its_way() -> None:
    assert waits(Run(first_stage_backlog=1, in_flight=P, num_waiting=1))
    assert waits(Run(first_stage_backlog=1, in_flight=P, admitting=2))
    assert not waits(Run(first_stage_backlog=1, in_flight=P))      # waiting would only idle stage 0
    assert not waits(Run(first_stage_backlog=1, in_flight=P - 1, num_waiting=1))


def test_the_baselines_never_wait() -> None:
    assert not NoFill().should_wait(Run(first_stage_backlog=3, in_flight=P, num_waiting=1), P, B_MIN)  # type: ignore[arg-type]


def test_in_a_closed_loop_a_small_wave_is_planned_only_once_stage_0_runs_its_last() -> None:
    """Kimi-K3 / B300, PP4, 64 clients with 8K-token prompts 90 % cached (the Kimi-K3 grid's setting): a
    remainder smaller than b_min is planned only once stage 0 runs the last wave it has (the dispatcher wakes
    on each wave stage 0 finishes while it holds one). Sent as soon as a ring slot freed, as before, the
    remainders went with three or four waves still ahead of them on stage 0."""
    cfg = BenchConfig(parse_workload("reuse90"), [64], ["wavepp"], 256, 0, prompt_tokens=8192,
                      model_name="kimi-k3", hardware_name="b300")
    rec = run_one(SimEngine(SimConfig("kimi-k3", "b300", 4, block_size=64)), cfg, "wavepp", 64)
    assert rec.figures.completed == 256
    plans = {int(s["a"][N.WAVE_ID]): s for s in rec.encoded if s["n"] == N.WAVE_PLAN and N.WAVE_ID in s["a"]}
    ends = {int(s["a"][N.WAVE_ID]): s["t1"] for s in rec.encoded if s["n"] == N.EXECUTE and s["a"][N.STAGE] == 0}
    small = [k for k, s in plans.items() if int(s["a"][N.TOKENS]) < B_MIN]
    assert small, "no remainder to hold: the case tests nothing"
    for k in small:
        at = plans[k]["t0"]
        assert sum(1 for j in plans if j < k and ends[j] > at) <= 1, f"wave {k} planned with stage 0 backed up"
