"""Preview accuracy from saved runs: a preview of a saved base run against runs made with the changed knobs.

The companion of ``scripts/preview_accuracy.py`` (which applies each change to a running runtime):
here every setting is its own ``wavepp bench --save-run`` run, made one after another on the same
machine, so the comparison does not depend on a change landing mid-run. DIR holds ``base.json.gz``
and one ``NAME.json.gz`` per change; CHANGES maps NAME to the knobs it changed::

    B="wavepp bench --engine sim --model llama-3-8b --hardware h200 --pp 4 --workload reuse90 \\
       --prompt-tokens 4096 --concurrency 16 --requests 1000 --policy wavepp --realtime --quiet \\
       --max-wave-tokens 8192 --min-wave-tokens 4096"
    $B --save-run DIR/base.json.gz; $B --ring 2 --save-run DIR/ring2.json.gz; …
    python scripts/preview_offline.py DIR '{"ring2": {"ring": 2}, …}' [--cost-profile PROFILE]

Prints per change the prediction (anchored on the base run), the replays' own figures, the observed
figures and the errors; writes them to DIR/offline.json.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from wavepp.runtime.runs.runfile import load_runs
from wavepp.runtime.whatif import preview as W


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dir")
    ap.add_argument("changes", help='JSON: {"NAME": {"knob": value, …}, …}')
    ap.add_argument("--cost-profile", default=None, help="torch: the calibration the preview replays with")
    args = ap.parse_args()
    d = Path(args.dir)
    base = load_runs(d / "base.json.gz")[0]
    spec = W.sim_spec(base.meta, args.cost_profile)
    replay = W.replay_of(base.spans, base.meta, None)
    current = W.knobs_at_end(base.meta, base.knob_changes)
    before = W.observed_over(base.spans, replay, spec.pp)
    rows: list[dict[str, Any]] = []
    for name, change in json.loads(args.changes).items():
        run = load_runs(d / f"{name}.json.gz")[0]
        seen = W.observed_over(run.spans, W.replay_of(run.spans, run.meta, None), spec.pp)
        started = time.monotonic()
        result = W.preview(replay, spec, current, current.replace(**change), 600)
        pred, raw = result.proposed.figures, result.proposed.replayed
        o, oe = seen.input_tokens_per_s or 0.0, seen.pipeline_efficiency or 0.0
        row = {"change": name, "sim": result.sim, "observed_tokens_per_s": o, "observed_efficiency": oe,
               "predicted_tokens_per_s": pred.input_tokens_per_s, "predicted_efficiency": pred.pipeline_efficiency,
               "throughput_error": (pred.input_tokens_per_s or 0.0) / o - 1,
               "efficiency_error": (pred.pipeline_efficiency or 0.0) - oe,
               "replayed_throughput_error": (raw.input_tokens_per_s or 0.0) / o - 1,
               "replayed_efficiency_error": (raw.pipeline_efficiency or 0.0) - oe,
               "predicted_change": result.throughput_gain,
               "observed_change": o / (before.input_tokens_per_s or 1.0) - 1,
               "replays_tokens_per_s": list(result.proposed.throughputs), "preview_s": time.monotonic() - started}
        rows.append(row)
        print(f"{name:8s} predicted {row['predicted_tokens_per_s']:12,.0f} tok/s eff "
              f"{row['predicted_efficiency']:.3f} | "
              f"observed {o:12,.0f} eff {oe:.3f} | error {row['throughput_error']:+.1%} "
              f"{row['efficiency_error']:+.3f} (replays alone {row['replayed_throughput_error']:+.1%} "
              f"{row['replayed_efficiency_error']:+.3f}) | change predicted {row['predicted_change'] or 0:+.1%}, "
              f"observed {row['observed_change']:+.1%} | {row['preview_s']:.0f} s", flush=True)
    (d / "offline.json").write_text(json.dumps({"base_tokens_per_s": before.input_tokens_per_s, "rows": rows},
                                               indent=1))


if __name__ == "__main__":
    main()
