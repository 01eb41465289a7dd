"""Summary of `make bench-torch`: per workload and launcher, both policies' input throughput and
their ratio, pipeline efficiencies, admission time on the critical path and the calibrated sim's
error (threads runs). With repeats (out/repK-*.json), each figure is the median over the runs, with
the range of the ratio and of the sim error beside it."""

import glob
import json
import statistics


def runs_of(mode: str, wl: str) -> list[dict[str, dict]]:
    out = []
    for path in sorted(glob.glob(f"out/{mode}-{wl}.json") + glob.glob(f"out/rep*-{mode}-{wl}.json")):
        with open(path) as f:
            out.append({x["policy"]: x for x in json.load(f)["runs"]})
    return out


def columns(runs: list[dict[str, dict]], policy: str) -> dict[str, list[float]]:
    """One policy's numeric figures, each as the list of its values over the runs."""
    first = runs[0][policy]
    return {k: [r[policy][k] for r in runs] for k, v in first.items() if isinstance(v, float)}


def med(values: list[float]) -> float:
    return statistics.median(values)


def span(values: list[float], fmt: str) -> str:
    return f" [{fmt.format(min(values))}..{fmt.format(max(values))}]" if len(values) > 1 else ""


for wl in ["reuse90", "suffix64", "suffix256", "suffix1024"]:
    for mode in ["threads", "spawn"]:
        runs = runs_of(mode, wl)
        if not runs:
            continue
        w, t = columns(runs, "wavepp"), columns(runs, "trtllm-pp")
        ratio = [r["wavepp"]["input_tokens_per_s"] / r["trtllm-pp"]["input_tokens_per_s"] for r in runs]
        sim = ""
        if "sim_throughput_error" in w:
            sw, st = w["sim_throughput_error"], t["sim_throughput_error"]
            sim = f" sim err w {med(sw):+.1%}{span(sw, '{:+.1%}')} t {med(st):+.1%}{span(st, '{:+.1%}')}"
        adm = [1e3 * med(x["admission_critical_path_s_per_request"]) for x in (w, t)]
        print(f"{wl:10s} {mode:7s} runs={len(runs)} req={runs[0]['wavepp']['requests']} "
              f"wavepp {med(w['input_tokens_per_s']):8,.0f} trt {med(t['input_tokens_per_s']):8,.0f} "
              f"ratio {med(ratio):.3f}{span(ratio, '{:.3f}')} "
              f"eff {med(w['pipeline_efficiency']):.3f}/{med(t['pipeline_efficiency']):.3f} "
              f"adm-crit ms/req {adm[0]:.3f}/{adm[1]:.3f}{sim}")
