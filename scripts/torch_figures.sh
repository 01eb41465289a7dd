#!/usr/bin/env bash
# Issue 3 figures: torch engine, tiny-llama, pp 2, c 32; threads (with the calibrated sim) and spawned processes.
set -u
cd "$(dirname "$0")/.."
mkdir -p out
W=.venv/bin/wavepp
$W calibrate --engine torch --model tiny-llama --pp 2 --out out/tiny-pp2.json > out/calibrate.log 2>&1
for spec in reuse90:256 suffix:64:512 suffix:256:256 suffix:1024:96; do
  wl=${spec%:*}; n=${spec##*:}; tag=${wl/:/}
  $W bench --engine torch --model tiny-llama --pp 2 --workload $wl --concurrency 32 --requests $n \
     --policy wavepp,trtllm-pp --sim-profile out/tiny-pp2.json --quiet --json out/threads-$tag.json > out/threads-$tag.log 2>&1
  $W bench --engine torch --model tiny-llama --pp 2 --workload $wl --concurrency 32 --requests $n \
     --policy wavepp,trtllm-pp --launcher spawn --quiet --json out/spawn-$tag.json > out/spawn-$tag.log 2>&1
done
.venv/bin/python scripts/torch_figures_summary.py
