# cadenza: `make demo` (the main job) and `make test`. Both install into .venv first.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
include docker/versions.env
# CPU build by default (installs from local disk where a wheel is cached). On a GPU machine:
#   make install CUDA=1      the default CUDA build of docker/versions.env (CUDA_VERSION)
#   make install CUDA=13.0   another build the pinned torch ships (src/cadenza/env/versions.py)
CUDA ?=
TORCH_INDEX ?= $(if $(CUDA),--index-url https://download.pytorch.org/whl/cu$(subst .,,$(if $(filter 1,$(CUDA)),$(CUDA_VERSION),$(CUDA))))
EXTRAS ?= dev

.PHONY: install test demo bench lint images-check clean

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml constraints.txt docker/versions.env
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q "torch==$(TORCH_VERSION)" $(TORCH_INDEX)
	$(BIN)/python -m pip install -q -c constraints.txt -e ".[$(EXTRAS)]"
	touch $@

test: install
	$(BIN)/python -m pytest -q tests

demo: install
	$(BIN)/cadenza demo

bench: install
	$(BIN)/python benchmarks/bench_tokenize.py

# Build both images from docker/Dockerfile, unedited, on a CPU stand-in for the PyTorch base (no
# registry needed: buildah, podman and mmdebstrap from Debian), then run them; skips without the tools.
images-check: install
	$(BIN)/python tools/images_check.py --out benchmarks/results/images/images.json

lint: install
	$(BIN)/ruff check src tests benchmarks tools
	$(BIN)/hadolint docker/Dockerfile

clean:
	rm -rf $(VENV) build .pytest_cache
