# Quick start: `make demo` (set-up + the main job) and `make test` (set-up + the whole suite).
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-dev

.PHONY: bench-autopilot bench-autopilot-torch bench-dashboard bench-replay demo test oracle test-reliability faults soak lint audit bench bench-torch bench-telemetry grid grid-pressure grid-kimi ablation ablation-kimi clean services stack client-check

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip

# One install of the project with its dev extras; redone when its build configuration changes.
# The editable install's sources are compiled once here: where the environment sets PYTHONDONTWRITEBYTECODE
# (these machines do) nothing else writes them, and every process - each CLI call, each test's child process -
# compiled them again at start. A source edited later is compiled in memory as before (its .pyc is stale).
$(STAMP): pyproject.toml setup.py | $(VENV)/bin/python
	$(PY) -m pip install -q -e '.[dev]'
	$(PY) -m compileall -q wavepp runtime store telemetry dashboard > /dev/null
	touch $@

# The main job: the runtime and the live dashboard together, embedded (no external service).
demo: $(STAMP)
	$(VENV)/bin/wavepp dashboard --port 8501

# The compose topology as processes on loopback (no container engine): redis-server, `wavepp serve`
# (torch, tiny-llama, PP2; WAVEPP_* variables apply) and the dashboard on its store. Ctrl-C stops it.
stack: $(STAMP) services
	$(VENV)/bin/wavepp stack --port 8000 --dashboard-port 8501

# The benchmark of the runtime-core issue: wavepp vs trtllm-pp on the simulated GLM-5.2 / B300.
bench: $(STAMP)
	@mkdir -p out
	$(VENV)/bin/wavepp bench --engine sim --model glm-5.2 --hardware b300 --pp 4 --workload suffix4k \
		--concurrency 8,32,128 --policy wavepp,trtllm-pp --json out/bench.json --trace out/bench-trace.json \
		--save-run out/bench-run.json.gz

# Every policy over the 40-setting grid (GLM-5.2 and MiniMax-M2.7, PP4, B300); about 25 minutes on 2 cores.
grid: $(STAMP)
	@mkdir -p out
	$(VENV)/bin/wavepp grid --jobs 2 --json out/grid.json --markdown out/grid.md

# The pressure grid: many distinct long contexts and traces that do not fit the pools (runtime/bench/grid_pressure.py).
grid-pressure: $(STAMP)
	@mkdir -p out
	$(VENV)/bin/wavepp grid --grid pressure --jobs 2 --json out/grid-pressure.json --markdown out/grid-pressure.md

# Kimi-K3 on one B300 node: WavePP against the PP loops and TP/EP deployments of three engines (runtime/bench/grid_kimi.py).
grid-kimi: $(STAMP)
	@mkdir -p out
	$(VENV)/bin/wavepp grid --grid kimi-k3 --jobs 2 --json out/grid-kimi.json --markdown out/grid-kimi.md

# WavePP's mechanisms off one at a time, and TensorRT-LLM's on one at a time (GLM-5.2, c=128, suffix4k).
WAVEPP_OFF := wavepp+admission=inline,wavepp+lookup=first-stage,wavepp+stage-admission=first-chunk,wavepp+chunking=mpu,wavepp+chunking=static,wavepp+ring=P,wavepp+fill=off
TRTLLM_ON := wavepp+charge=position0,wavepp+reserve=whole-prompt,wavepp+host=lockstep,wavepp+relay=on,wavepp+return=ring
ablation: $(STAMP)
	@mkdir -p out
	$(VENV)/bin/wavepp bench --engine sim --model glm-5.2 --hardware b300 --pp 4 --workload suffix4k \
		--concurrency 128 --policy wavepp,$(WAVEPP_OFF),$(TRTLLM_ON),trtllm-pp,trtllm-pp-legacy --json out/ablation.json

# The same on Kimi-K3 (c=32, 128K-token documents at half the smallest pool, as in the kimi-k3 grid), then the
# state-snapshot interval swept.
KIMI_DOCS := --engine sim --model kimi-k3 --hardware b300 --pp 4 --workload docs:36:suffix=4096 --prompt-tokens 131072 \
	--concurrency 32 --requests 128 --quiet
ablation-kimi: $(STAMP)
	@mkdir -p out
	$(VENV)/bin/wavepp bench $(KIMI_DOCS) --policy wavepp,$(WAVEPP_OFF),wavepp+share=off,trtllm-pp,sglang-pp,vllm-pp \
		--json out/ablation-kimi.json
	for interval in 4096 8192 16384 32768 65536; do \
		$(VENV)/bin/wavepp bench $(KIMI_DOCS) --policy wavepp,vllm-pp --snapshot-interval $$interval \
			--json out/ablation-kimi-snapshot-$$interval.json || exit 1; done

# Peers' own schedulers on fixed scenarios (scripts/oracle/, tests/data/oracle/README.md): vLLM 0.34.0's v1
# Scheduler and KVCacheManager on a CPU with a faked model output, and SGLang 0.5.23's Scheduler on a CPU (PP 1,
# dummy weights of a one-layer model); per step, the tokens scheduled per request and each request's hit at its
# first scheduling, into tests/data/oracle/*.json (make test compares our presets with them:
# tests/test_oracle_fixtures.py). Not part of make test: its own venv, about 9 GB with vLLM's CUDA torch and
# 15-20 minutes to install on 2 cores, then about 4 minutes to run. SGLang goes in without its dependencies
# (it pins another torch and transformers; the scheduler runs on vLLM's), with the two it imports beyond them.
ORACLE_VENV  ?= .venv-oracle
ORACLE_STAMP := $(ORACLE_VENV)/.installed-vllm-0.34.0-sglang-0.5.23
$(ORACLE_STAMP): scripts/oracle/requirements-vllm.txt
	test -x $(ORACLE_VENV)/bin/python || $(PYTHON) -m venv $(ORACLE_VENV)
	$(ORACLE_VENV)/bin/pip install -q --no-deps vllm==0.34.0
	$(ORACLE_VENV)/bin/pip install -q -r scripts/oracle/requirements-vllm.txt
	$(ORACLE_VENV)/bin/pip install -q --no-deps sglang==0.5.23
	$(ORACLE_VENV)/bin/pip install -q ipython==9.18.1 gguf==0.19.0
	touch $@

oracle: $(ORACLE_STAMP)
	$(ORACLE_VENV)/bin/python scripts/oracle/vllm_oracle.py
	$(ORACLE_VENV)/bin/python scripts/oracle/sglang_oracle.py

# Issue 3's figures: the torch engine (threads with the calibrated sim, and spawned processes),
# wavepp vs trtllm-pp on four workloads; about 25 minutes on a 2-core CPU.
bench-torch: $(STAMP)
	scripts/torch_figures.sh

# The autopilot on a phased trace (shared system prompts, long documents, long cold prompts), the sim in virtual
# time, from the default knobs and from M=32768/b_min=16384: per phase against the same knobs fixed and the
# hindsight-best fixed setting of Suggest's grid (docs/autopilot.md); about 10 minutes each on 2 cores.
bench-autopilot: $(STAMP)
	@mkdir -p out
	$(PY) scripts/bench_autopilot.py --trace out/phased-trace.jsonl --json out/bench-autopilot.json \
		--markdown out/bench-autopilot.md
	$(PY) scripts/bench_autopilot.py --start max_wave_tokens=32768,min_wave_tokens=16384 \
		--trace out/phased-trace.jsonl --json out/bench-autopilot-wide.json --markdown out/bench-autopilot-wide.md

# The same on the torch engine in real time (tiny-llama, PP2, this machine's CPU), phases sized to it, the
# autopilot's search in the sim calibrated here first and bounded to the ring (each fixed setting is minutes of
# real time): from the default ring and from ring=2 (P); about 20 minutes on 2 cores with nothing beside.
bench-autopilot-torch: $(STAMP)
	@mkdir -p out
	$(VENV)/bin/wavepp calibrate --engine torch --model tiny-llama --pp 2 --out out/tiny-pp2.json
	$(PY) scripts/bench_autopilot.py --engine torch --sim-profile out/tiny-pp2.json --window 10 --search 30 \
		--concurrency 16 --trace out/phased-trace-torch.jsonl --json out/bench-autopilot-torch.json \
		--markdown out/bench-autopilot-torch.md
	$(PY) scripts/bench_autopilot.py --engine torch --sim-profile out/tiny-pp2.json --window 10 --search 30 \
		--concurrency 16 --start ring=2 --trace out/phased-trace-torch.jsonl \
		--json out/bench-autopilot-torch-ring2.json --markdown out/bench-autopilot-torch-ring2.md

# The live view under load: headless chromium on the embedded sim demo and on a synthetic span stream
# (Redis, db 13) at 1x, 2.5x and 5x the demo's span rate; 10 minutes a target (--duration).
bench-dashboard: $(STAMP)
	@mkdir -p out
	$(PY) scripts/bench_dashboard.py --duration 600 --json out/bench-dashboard.json

# Issue 11's figures: throughput with every span exported over OTLP to a local receiver vs
# --telemetry off (torch engine and real-time sim, modes rotated over 6 repeats), cost per span,
# memory of 100k spans in the dashboard's ring; about 15 minutes on 2 cores.
bench-telemetry: $(STAMP)
	@mkdir -p out
	$(PY) scripts/telemetry_cost.py --json out/telemetry-cost.json

# What a replay costs: wall time a request and peak memory of every policy on the shared Mooncake-format
# traces, one process a run (docs/bench-and-grid.md); BEFORE=<checkout with its .venv> compares, alternated.
bench-replay: $(STAMP)
	@mkdir -p out
	$(PY) scripts/bench_replay.py $(if $(BEFORE),--before $(BEFORE)) | tee out/bench-replay.md

# Benchmark clients against `wavepp serve` (scripts/client_check.py, docs/serve.md): aiperf in a virtualenv of its
# own (its dependencies are not the project's; genai-bench in one inside it, run when it installed), the sim and
# torch servers on loopback, aiperf's synthetic profile and Mooncake trace replay and genai-bench's synthetic profile,
# the clients' figures beside the server's in out/client-check.md; about 15 minutes on 2 cores. Not in `make test`.
CLIENTS_VENV ?= .venv-clients
$(CLIENTS_VENV)/bin/aiperf:
	$(PYTHON) -m venv $(CLIENTS_VENV)
	$(CLIENTS_VENV)/bin/pip install -q aiperf==0.13.0
	$(PYTHON) -m venv $(CLIENTS_VENV)/genai-bench       # its own: its pins are not aiperf's
	$(CLIENTS_VENV)/genai-bench/bin/pip install -q genai-bench==0.0.5 || echo "client-check: genai-bench does not install here: skipped"

client-check: $(STAMP) $(CLIENTS_VENV)/bin/aiperf
	@mkdir -p out
	$(PY) scripts/client_check.py --aiperf $(CLIENTS_VENV)/bin/aiperf --out out/client-check \
	    $$(test -x $(CLIENTS_VENV)/genai-bench/bin/genai-bench && echo --genai-bench $(CLIENTS_VENV)/genai-bench/bin/python)

# Tests talk to a real Redis: the one on 127.0.0.1:6379 when it answers, else a private
# redis-server they start themselves. Install the server from Debian when it is missing.
# The browser test drives Debian's chromium (test tools cannot download their own browser here).
# The deployment tests validate compose.yaml with Debian's docker-compose (no container engine runs).
services:
	@command -v redis-server >/dev/null 2>&1 && test -x /usr/bin/chromium && command -v docker-compose >/dev/null 2>&1 || { \
		echo "installing redis-server, chromium and docker-compose (Debian packages)"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server chromium docker-compose >/dev/null; }

test: $(STAMP) services
	$(PY) -m pytest

# The stateful machines and property tests at length (the `reliability` hypothesis profile of
# tests/conftest.py: 2,500 examples each, 60 steps per stateful example; the whole-loop machine 400 runs of 40
# events), with hypothesis's counts.
RELIABILITY := tests/kvcache/test_cache_machine.py tests/store/test_probe.py tests/test_planner.py \
	tests/test_hashing.py tests/test_report.py tests/engines/sim/test_perf_interp.py tests/test_loop_machine.py
test-reliability: $(STAMP) services
	WAVEPP_HYPOTHESIS_PROFILE=reliability $(PY) -m pytest $(RELIABILITY) --hypothesis-show-statistics

# The fault matrix (tests/serve/faults, docs/faults.md): each fault injected into a running service with
# its seconds to detect and to recover; the table at the end and in out/faults.json + .md. About 5 minutes.
faults: $(STAMP) services
	WAVEPP_FAULTS=1 WAVEPP_FAULT_REPORT=out/faults.json $(PY) -m pytest tests/serve/faults

# The soak (scripts/soak.py, docs/faults.md): wavepp serve (torch, spawned stages, Redis) under load with
# cancellations and knob changes for 30 minutes, then 100,000 requests on the sim; out/soak.json + .md.
soak: $(STAMP) services
	$(PY) scripts/soak.py --report out/soak.json

# mypy reads the package laid out as the build maps it (scripts/typecheck.py).
lint: $(STAMP)
	$(VENV)/bin/ruff check runtime store telemetry dashboard tests scripts wavepp setup.py
	$(PY) scripts/typecheck.py

# Known vulnerabilities of the installed packages (pip-audit against PyPI's advisory data; SERVICE=osv
# asks OSV instead). One line and exit 2 when the service cannot be reached or knows none of them.
SERVICE ?= pypi
audit: $(STAMP)
	@$(PY) scripts/audit.py --service $(SERVICE)

clean:
	rm -rf $(VENV) $(ORACLE_VENV) $(CLIENTS_VENV) out .pytest_cache .mypy_cache .ruff_cache
