#!/usr/bin/env bash
# Issue 12 figures: `wavepp bench --url` against a local `wavepp serve` vs the in-process bench of the
# same settings (torch, tiny-llama, PP2, reuse90, c=32, the same 512 seeded requests), then how many
# 429s a second the server answers when its admission queue is full. REQUESTS=N changes the count.
set -u
cd "$(dirname "$0")/.."
mkdir -p out
W=.venv/bin/wavepp
N=${REQUESTS:-512}
$W bench --engine torch --model tiny-llama --pp 2 --workload reuse90 --concurrency 32 --requests "$N" \
   --policy wavepp --quiet --json out/serve-inprocess.json > out/serve-inprocess.log 2>&1
$W serve --engine torch --model tiny-llama --pp 2 --port 0 > out/serve.log 2> out/serve.err &
SERVER=$!
for _ in $(seq 120); do URL=$(grep -o 'http://[^"]*' out/serve.log); [ -n "$URL" ] && break; sleep 1; done
$W bench --url "$URL" --workload reuse90 --concurrency 32 --requests "$N" --quiet --json out/serve-url.json \
   > out/serve-url.log 2>&1
kill -TERM $SERVER; wait $SERVER
# Overload: a queue of 4 and 8 KV blocks' worth of prompts in flight at most; open loop far past capacity.
$W serve --engine torch --model tiny-llama --pp 2 --port 0 --max-queue 4 --kv-blocks 64 > out/serve-429.log 2>&1 &
SERVER=$!
for _ in $(seq 120); do URL=$(grep -o 'http://[^"]*' out/serve-429.log); [ -n "$URL" ] && break; sleep 1; done
$W bench --url "$URL" --workload cold --rate 2000 --requests 4000 --concurrency 1 --quiet --json out/serve-429.json \
   > out/serve-429-bench.log 2>&1
kill -TERM $SERVER; wait $SERVER
.venv/bin/python - <<'PY'
import json
a = json.load(open("out/serve-inprocess.json"))["runs"][0]
b = json.load(open("out/serve-url.json"))["runs"][0]
o = json.load(open("out/serve-429.json"))["runs"][0]["client"]
f = lambda x, s=".3f": "-" if x is None else format(x, s)
print(f"in-process: {f(a['input_tokens_per_s'], ',.0f')} input tok/s, prefill p50/p95 "
      f"{f(a['prefill_latency_p50_s'])}/{f(a['prefill_latency_p95_s'])} s")
c = b["client"]
print(f"over HTTP:  {f(b['input_tokens_per_s'], ',.0f')} input tok/s (server spans), {f(c['input_tokens_per_s'], ',.0f')} "
      f"(clients); prefill p50/p95 {f(b['prefill_latency_p50_s'])}/{f(b['prefill_latency_p95_s'])} s; client latency "
      f"p50/p95 {f(c['latency_p50_s'])}/{f(c['latency_p95_s'])} s; HTTP overhead p50 {f(c['http_overhead_p50_s'], '.4f')} s")
print(f"ratio (clients' tok/s / in-process): {c['input_tokens_per_s'] / a['input_tokens_per_s']:.3f}")
print(f"overload: {o['sent']} sent in {o['wall_s']:.1f} s, {o['refused_429']} answered 429 "
      f"({o['refused_429'] / o['wall_s']:,.0f}/s), {o['answered']} prefilled, {o['failed']} failed")
PY
