#!/usr/bin/env bash
# Issue 3 figures: torch engine, tiny-llama, pp 2, c 32; threads (with the calibrated sim) and spawned processes.
# REPEATS=N (default 1) runs every pair N times (out/threads-W.json, then out/repK-threads-W.json for K >= 2):
# this machine's run-to-run noise is about ±10 %, so the summary gives the median and range over the repeats.
set -u
cd "$(dirname "$0")/.."
mkdir -p out
W=.venv/bin/wavepp
$W calibrate --engine torch --model tiny-llama --pp 2 --out out/tiny-pp2.json > out/calibrate.log 2>&1
for r in $(seq 1 "${REPEATS:-1}"); do
  pre=$([ "$r" = 1 ] && echo "" || echo "rep$r-")
  for spec in reuse90:256 suffix:64:512 suffix:256:256 suffix:1024:96; do
    wl=${spec%:*}; n=${spec##*:}; tag=${wl/:/}
    $W bench --engine torch --model tiny-llama --pp 2 --workload $wl --concurrency 32 --requests $n \
       --policy wavepp,trtllm-pp --sim-profile out/tiny-pp2.json --quiet --json out/${pre}threads-$tag.json > out/${pre}threads-$tag.log 2>&1
    $W bench --engine torch --model tiny-llama --pp 2 --workload $wl --concurrency 32 --requests $n \
       --policy wavepp,trtllm-pp --launcher spawn --quiet --json out/${pre}spawn-$tag.json > out/${pre}spawn-$tag.log 2>&1
  done
done
.venv/bin/python scripts/torch_figures_summary.py
