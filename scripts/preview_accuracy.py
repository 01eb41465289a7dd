"""How well does a preview predict what the runtime then does? (issue 13: predicted vs observed)

Starts the embedded runtime (the real-time sim, or the torch engine with a calibration profile) in a
child process, as ``wavepp dashboard`` does, and for each knob change in turn: previews it on the
arrivals of the last ``--window`` seconds (``runtime.whatif``, the code the Knobs page runs), applies
it through the runtime's store, waits until the runtime applied it and ``--window`` more seconds, and
compares the prediction with the figures of the requests that arrived in that window.

    python scripts/preview_accuracy.py --engine sim
    python scripts/preview_accuracy.py --engine torch --cost-profile out/tiny-llama-pp2.json

Prints one row per change (predicted and observed input throughput and pipeline efficiency, the
errors, the preview's wall time) and writes them as JSON with ``--json``.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from dashboard.embedded import start_child
from dashboard.whatif_jobs import change_time_ns
from runtime.knobs import CPU_KNOBS, Knobs, from_changes
from runtime.report import fmt
from runtime.whatif import gain, observed_over, observed_since, preview, replay_of, sim_spec

SIM_CHANGES = ["ring=2", "ring=8", "max_wave_tokens=4096,min_wave_tokens=1024"]
TORCH_CHANGES = ["ring=1", "ring=4", "max_wave_tokens=512,min_wave_tokens=256"]


def parse_change(text: str) -> dict[str, int]:
    return {k: int(v) for k, v in (item.split("=") for item in text.split(","))}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--engine", choices=["sim", "torch"], default="sim")
    ap.add_argument("--cost-profile", default=None, help="torch: the calibration the preview replays with")
    ap.add_argument("--pp", type=int, default=None)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--prompt-tokens", type=int, default=None)
    ap.add_argument("--window", type=float, default=None, help="seconds replayed / observed per change")
    ap.add_argument("--change", action="append", default=None, help="NAME=V[,NAME=V] (repeatable; in turn)")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    torch_engine = args.engine == "torch"
    pp = args.pp or (2 if torch_engine else 4)
    window = args.window or (40.0 if torch_engine else 15.0)
    if torch_engine:
        engine_args: dict[str, Any] = {"kind": "torch", "model": "tiny-llama", "pp": pp}
        knobs = CPU_KNOBS
        prompt = args.prompt_tokens or 512
    else:
        engine_args = {"kind": "sim", "model": "llama-3-8b", "hardware": "h200", "pp": pp, "realtime": True,
                       "time_scale": 1.0}
        knobs = Knobs(max_wave_tokens=8192, min_wave_tokens=4096)
        prompt = args.prompt_tokens or 4096
    runtime_args = {"workload": "reuse90", "concurrency": args.concurrency, "prompt_tokens": prompt, "knobs": knobs}
    remote, proc = start_child(engine_args, runtime_args)
    spans: list[dict[str, Any]] = []
    after = 0

    def pull() -> None:
        nonlocal after
        got, after = remote.read(after)
        spans.extend(got)

    rows = []
    try:
        time.sleep(window + 5)                      # warm-up: a full window of arrivals under the start knobs
        for text in args.change or (TORCH_CHANGES if torch_engine else SIM_CHANGES):
            pull()
            status = remote.status(1)[-1]
            caps = [int(s["capacity"]) for s in status["stages"]]
            sim_args = None if torch_engine else {k: engine_args[k] for k in ("model", "hardware", "time_scale",
                                                                             "realtime")}
            meta = {"engine": args.engine, "model": engine_args["model"], "hardware": engine_args.get("hardware"),
                    "pp": pp, "capacities": caps, "block_size": 64, "concurrency": args.concurrency,
                    "workload": "reuse90", "sim": sim_args}
            spec = sim_spec(meta, args.cost_profile)
            replay = replay_of(spans, meta, window)
            current = from_changes(remote.knobs().values, {})
            proposed = current.replace(**parse_change(text))
            started = time.monotonic()
            result = preview(replay, spec, current, proposed, 300.0)
            took = time.monotonic() - started
            applied_after = time.time_ns()
            remote.set_knobs(result.changes or parse_change(text))
            since = None
            while since is None:
                time.sleep(0.5)
                pull()
                since = change_time_ns(spans, parse_change(text), applied_after - 1_000_000_000)
            time.sleep(window)
            pull()
            observed = observed_since(spans, since, pp, since + int(window * 1e9))
            pred = result.proposed.figures
            row = {"change": text, "replayed": replay.note, "preview_s": took,
                   "predicted_tokens_per_s": pred.input_tokens_per_s,
                   "observed_tokens_per_s": observed.input_tokens_per_s,
                   "predicted_efficiency": pred.pipeline_efficiency,
                   "observed_efficiency": observed.pipeline_efficiency,
                   "predicted_before_tokens_per_s": result.current.figures.input_tokens_per_s,
                   "observed_requests": observed.completed}
            o, p = observed.input_tokens_per_s, pred.input_tokens_per_s
            oe, pe = observed.pipeline_efficiency, pred.pipeline_efficiency
            err_t = p / o - 1 if o and p is not None else None
            err_e = pe - oe if oe is not None and pe is not None else None
            # The replay of the current knobs against what the run did over the same arrivals: the part of
            # the error that is the sim's absolute level, not the knob change.
            before = observed_over(spans, replay, pp)
            base_err = gain(before.input_tokens_per_s, result.current.figures.input_tokens_per_s)
            change_pred = gain(result.current.figures.input_tokens_per_s, p)
            change_obs = gain(before.input_tokens_per_s, o)
            row |= {"throughput_error": err_t, "efficiency_error": err_e, "current_knobs_error": base_err,
                    "predicted_change": change_pred, "observed_change": change_obs}
            rows.append(row)
            print(f"{text:45s} predicted {fmt(p, ',.0f')} tok/s eff {fmt(pe, '.3f')} | observed {fmt(o, ',.0f')} "
                  f"tok/s eff {fmt(oe, '.3f')} ({observed.completed} requests) | error "
                  f"{fmt(err_t, '+.1%')}, eff {fmt(err_e, '+.3f')} | "
                  f"preview {took:.1f} s | current knobs replayed {fmt(base_err, '+.1%')} | change predicted "
                  f"{fmt(change_pred, '+.1%')}, observed {fmt(change_obs, '+.1%')}", flush=True)
    finally:
        proc.kill()
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"engine": args.engine, "window_s": window, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
