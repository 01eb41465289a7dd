"""What a run is, as one JSON dict: the ``meta`` a saved run keeps (``wavepp bench --save-run``) and the
description the runtime publishes to its store when the run starts (``Store.run_meta_put``).

A viewer of a live store (the dashboard's Preview and Suggest: :func:`runtime.whatif.preview.sim_spec`) then
knows the engine, model, hardware, stages, workload and starting knobs as well as a saved file does.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from wavepp.runtime.control.knobs import Knobs
from wavepp.runtime.policies import get_policy
from wavepp.runtime.runs.runfile import RunInfo


def describe_run(engine: Any, run: RunInfo, knobs: Knobs, capacities: Sequence[int], model: str | None = None,
                 hardware: str | None = None) -> dict[str, Any]:
    """``engine`` (a sim or torch engine) running ``run`` with ``knobs`` on stages of ``capacities``
    blocks. ``model`` and ``hardware`` default to the engine's own (the sim's profiles; the torch
    engine's model, which a calibration profile must match); a sim run also carries its ``sim``
    arguments, what rebuilds it for a what-if replay."""
    policy = get_policy(knobs.policy)
    replay_args: dict[str, Any] | None = getattr(engine, "replay_args", None)
    sim = replay_args or {}
    meta: dict[str, Any] = {
        "policy": knobs.policy, "engine": engine.name,
        "model": model or sim.get("model") or getattr(engine, "model_name", None),
        "hardware": hardware or sim.get("hardware"),
        "concurrency": run.concurrency, "workload": run.workload,
        "mechanisms": policy.mechanisms(),
        "pp": engine.pp, "capacities": list(capacities), "block_size": engine.block_size,
        "knobs": knobs.as_dict(), "run": run.as_dict()}
    if replay_args is not None:
        meta["sim"] = dict(replay_args)
        # What "auto" chose here (kernel tables where they cover the model, else the roofline): a replay
        # on a machine whose tables differ must price the run's steps as the run did, not choose again.
        chosen = str(getattr(engine, "cost_model_name", "")).split(" ")[0]
        if meta["sim"].get("cost_model") == "auto" and chosen in ("table", "analytic"):
            meta["sim"]["cost_model"] = chosen
    return meta
