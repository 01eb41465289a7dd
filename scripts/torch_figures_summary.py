"""Summary of `make bench-torch`: per workload and launcher, both policies' input throughput and
ratio, pipeline efficiencies, admission time on the critical path and the calibrated sim's error
(threads runs)."""

import json

for wl in ["reuse90", "suffix64", "suffix256", "suffix1024"]:
    for mode in ["threads", "spawn"]:
        try:
            with open(f"out/{mode}-{wl}.json") as f:
                runs = {x["policy"]: x for x in json.load(f)["runs"]}
        except FileNotFoundError:
            continue
        w, t = runs["wavepp"], runs["trtllm-pp"]
        sim = ""
        if "sim_throughput_error" in w:
            sim = f" sim err w/t {w['sim_throughput_error']:+.1%} / {t['sim_throughput_error']:+.1%}"
        adm = [1e3 * r["admission_critical_path_s_per_request"] for r in (w, t)]
        print(f"{wl:10s} {mode:7s} req={w['requests']} wavepp {w['input_tokens_per_s']:8,.0f} "
              f"trt {t['input_tokens_per_s']:8,.0f} ratio {w['input_tokens_per_s'] / t['input_tokens_per_s']:.3f} "
              f"eff {w['pipeline_efficiency']:.3f}/{t['pipeline_efficiency']:.3f} "
              f"adm-crit ms/req {adm[0]:.3f}/{adm[1]:.3f}{sim}")
