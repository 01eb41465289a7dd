"""How well does a preview predict what the runtime then does? (predicted vs observed)

Starts the embedded runtime (the real-time sim, or the torch engine with a calibration profile) in a
child process, as ``wavepp dashboard`` does, and for each knob change in turn: previews it on the
arrivals of the last ``--window`` seconds (``runtime.whatif.preview``, the code the Knobs page runs), applies
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

from wavepp.dashboard.embedded import start_child
from wavepp.dashboard.whatif_jobs import change_time_ns
from wavepp.runtime.control.knobs import CPU_KNOBS, Knobs, from_changes
from wavepp.runtime.engines.config import EngineConfig, SimConfig, TorchConfig
from wavepp.runtime.figures.report import fmt
from wavepp.runtime.whatif.preview import gain, observed_over, observed_since, preview, replay_of, sim_spec

SIM_CHANGES = ["ring=2", "ring=8", "max_wave_tokens=4096,min_wave_tokens=1024"]
TORCH_CHANGES = ["ring=1", "ring=4", "max_wave_tokens=512,min_wave_tokens=256"]


def error(predicted: float | None, observed: float | None) -> float | None:
    return predicted / observed - 1 if predicted is not None and observed else None


def diff(predicted: float | None, observed: float | None) -> float | None:
    return predicted - observed if predicted is not None and observed is not None else None


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
        engine: EngineConfig = TorchConfig("tiny-llama", pp)
        knobs = CPU_KNOBS
        prompt = args.prompt_tokens or 512
    else:
        engine = SimConfig("llama-3-8b", "h200", pp, clock="wall")
        knobs = Knobs(max_wave_tokens=8192, min_wave_tokens=4096)
        prompt = args.prompt_tokens or 4096
    runtime_args = {"workload": "reuse90", "concurrency": args.concurrency, "prompt_tokens": prompt, "knobs": knobs}
    remote, proc = start_child(engine, runtime_args)
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
            meta = remote.run_meta() or {}        # what the runtime published when it started (runtime.runs.meta)
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
            pred, raw = result.proposed.figures, result.proposed.replayed       # anchored on the run; the replays'
            o, oe = observed.input_tokens_per_s, observed.pipeline_efficiency
            # The replay of the current knobs against what the run did over the same arrivals: the offset
            # the anchoring takes out (the sim's absolute level, not the knob change).
            before = observed_over(spans, replay, pp)
            row = {"change": text, "replayed": replay.note, "preview_s": took, "sim": result.sim,
                   "observed_tokens_per_s": observed.input_tokens_per_s, "observed_efficiency": oe,
                   "observed_requests": observed.completed,
                   "predicted_tokens_per_s": pred.input_tokens_per_s, "predicted_efficiency": pred.pipeline_efficiency,
                   "replayed_tokens_per_s": raw.input_tokens_per_s, "replayed_efficiency": raw.pipeline_efficiency,
                   "replays_tokens_per_s": list(result.proposed.throughputs),
                   "throughput_error": error(pred.input_tokens_per_s, o),
                   "efficiency_error": diff(pred.pipeline_efficiency, oe),
                   "replayed_throughput_error": error(raw.input_tokens_per_s, o),
                   "replayed_efficiency_error": diff(raw.pipeline_efficiency, oe),
                   "current_knobs_error": gain(before.input_tokens_per_s, result.current.replayed.input_tokens_per_s),
                   "predicted_change": result.throughput_gain,
                   "observed_change": gain(before.input_tokens_per_s, o)}
            rows.append(row)
            r = {k: fmt(v, "+.3f" if "efficiency" in k else "+.1%") for k, v in row.items() if "error" in k or
                 "change" in k and k != "change"}
            print(f"{text:45s} predicted {fmt(pred.input_tokens_per_s, ',.0f')} tok/s eff "
                  f"{fmt(pred.pipeline_efficiency, '.3f')} | observed {fmt(o, ',.0f')} tok/s eff {fmt(oe, '.3f')} "
                  f"({observed.completed} requests) | error {r['throughput_error']}, eff {r['efficiency_error']} "
                  f"(replays alone {r['replayed_throughput_error']}, {r['replayed_efficiency_error']}) | preview "
                  f"{took:.1f} s | current knobs replayed {r['current_knobs_error']} | change predicted "
                  f"{r['predicted_change']}, observed {r['observed_change']}", flush=True)
    finally:
        proc.kill()
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"engine": args.engine, "window_s": window, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
