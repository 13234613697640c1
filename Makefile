# tenfold: the two commands. `make demo` runs the main job (`tenfold compare`); `make test` runs the
# default suite.
# Both create .venv on first use. Torch: if the interpreter already has torch, the venv reuses it
# (--system-site-packages); otherwise TORCH_SPEC is installed first. On this project's build machines
# `torch==2.13.0` resolves to the CPU wheel that lies on disk; override TORCH_SPEC elsewhere.

PYTHON     ?= python3
VENV       ?= .venv
BIN        := $(VENV)/bin
TORCH_SPEC ?= torch==2.13.0
PYTEST_ARGS ?=

.PHONY: demo test test-all lint format bench clean

$(BIN)/python:
	@if $(PYTHON) -c "import torch" >/dev/null 2>&1; then \
	  echo "torch already installed for $(PYTHON): the venv will reuse it"; \
	  $(PYTHON) -m venv --system-site-packages $(VENV); \
	else \
	  $(PYTHON) -m venv $(VENV); \
	fi

$(VENV)/.torch: | $(BIN)/python
	@$(BIN)/python -c "import torch" >/dev/null 2>&1 || $(BIN)/pip install --quiet "$(TORCH_SPEC)"
	@touch $@

$(VENV)/.installed: pyproject.toml $(VENV)/.torch
	$(BIN)/pip install --quiet -e .
	@touch $@

$(VENV)/.installed-dev: pyproject.toml $(VENV)/.torch
	$(BIN)/pip install --quiet -e ".[dev]"
	@touch $@ $(VENV)/.installed

demo: $(VENV)/.installed
	$(BIN)/tenfold compare

test: $(VENV)/.installed-dev
	$(BIN)/ruff check src tests benchmarks examples
	$(BIN)/python -m pytest -q -m "not slow" $(PYTEST_ARGS)

test-all: $(VENV)/.installed-dev
	$(BIN)/python -m pytest -q $(PYTEST_ARGS)

lint: $(VENV)/.installed-dev
	$(BIN)/ruff check src tests benchmarks examples
	$(BIN)/ruff format --check src tests benchmarks examples

format: $(VENV)/.installed-dev
	$(BIN)/ruff check --fix src tests benchmarks examples
	$(BIN)/ruff format src tests benchmarks examples

bench: $(VENV)/.installed-dev
	$(BIN)/python benchmarks/quantize_throughput.py
	$(BIN)/python benchmarks/search_speed.py

clean:
	rm -rf $(VENV) build dist src/*.egg-info .pytest_cache .ruff_cache
