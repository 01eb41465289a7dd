# Quick start: `make demo` (set-up + the main job) and `make test` (set-up + the whole suite).
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-dev

.PHONY: demo test lint bench clean

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip

# One install of the project with its dev extras; redone when pyproject.toml changes.
$(STAMP): pyproject.toml | $(VENV)/bin/python
	$(PY) -m pip install -q -e '.[dev]'
	touch $@

demo: $(STAMP)
	@mkdir -p out
	$(VENV)/bin/wavepp bench --engine sim --model glm-5.2 --hardware b300 --pp 4 --workload suffix4k \
		--concurrency 8,32,128 --policy wavepp,trtllm-pp --json out/demo.json --trace out/demo-trace.json

test: $(STAMP)
	$(PY) -m pytest

lint: $(STAMP)
	$(VENV)/bin/ruff check runtime store telemetry tests
	$(VENV)/bin/mypy

clean:
	rm -rf $(VENV) out .pytest_cache .mypy_cache .ruff_cache
