"""Side-by-side summary of scripts/torch_figures.sh: throughput ratio, efficiencies, admission on the
critical path, the calibrated sim's error (threads runs), per workload and launcher."""

import json
for wl in ["reuse90", "suffix64", "suffix256", "suffix1024"]:
    for mode in ["threads", "spawn"]:
        try: d = json.load(open(f"out/{mode}-{wl}.json"))
        except FileNotFoundError: continue
        r = {x["policy"]: x for x in d["runs"]}
        w, t = r["wavepp"], r["trtllm-pp"]
        sim = " sim err w/t %+.1f%% / %+.1f%%" % (100*w["sim_throughput_error"], 100*t["sim_throughput_error"]) if "sim_throughput_error" in w else ""
        print(f"{wl:10s} {mode:7s} req={w['requests']} wavepp {w['input_tokens_per_s']:8,.0f} trt {t['input_tokens_per_s']:8,.0f} ratio {w['input_tokens_per_s']/t['input_tokens_per_s']:.3f}"
              f" eff {w['pipeline_efficiency']:.3f}/{t['pipeline_efficiency']:.3f} adm-crit ms/req {1e3*w['admission_critical_path_s_per_request']:.3f}/{1e3*t['admission_critical_path_s_per_request']:.3f}{sim}")
