# Every target sets up what it needs: a virtual environment in .venv with the
# CPU build of torch installed first (a looser torch requirement would pull a
# multi-gigabyte CUDA wheel), then gnnrun in editable mode with its dev extras.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
TORCH_SPEC ?= torch==2.13.0
STAMP := $(VENV)/.installed

.PHONY: setup run test test-slow test-docs test-slurm test-faults test-gpu test-torch gpu-wheels test-package test-tracking lint format bench-partition bench-fullbatch bench-train bench-hec bench-sar bench-pipeline bench-bounded-memory bench-gpu bench-tracking dgl-venv bench-vs-dgl bench-vs-dgl-check clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet "$(TORCH_SPEC)"
	$(BIN)/pip install --quiet -e ".[dev]"
	touch $@

run: setup
	$(BIN)/gnnrun train

# The default suite in TEST_WORKERS processes (pytest-xdist), a test file to a worker: most
# tests start ranks and wait on them, so two workers finish in about 70% of the time on
# 2 cores. TEST_WORKERS=0 runs it in this process.
TEST_WORKERS ?= 2

test: setup lint
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadfile

test-slow: setup
	$(BIN)/python -m pytest -q -m slow

# The quick commands of README.md and docs/, run for real from empty directories as
# typed (the default suite composes every documented command).
test-docs: setup
	$(BIN)/python -m pytest -q -m docs tests/test_docs_commands.py

# Starts a single-node SLURM on this machine (scripts/slurm_cluster.sh; installs
# slurm-wlm and munge with apt-get when missing) and submits real jobs to it.
test-slurm: setup
	$(BIN)/python -m pytest -q -m slurm

# Restarts after injected faults, signals (Ctrl-C, kill) to gnnrun and its ranks, and runs
# across network namespaces (hosts with addresses of their own, joined by veth pairs):
# lost hosts, cut links, hung ranks.
# Needs root (ip netns); the namespace tests skip, saying why, where it is missing.
test-faults: setup
	$(BIN)/python -m pytest -q -m faults

# On a machine with a CUDA device: every algorithm that runs on GPUs trains there as on
# the CPU, bf16 within tolerance, predict on the GPU equals predict on the CPU. Without
# one every test skips, saying so.
test-gpu: setup
	$(BIN)/python -m pytest -q -rs -m gpu

# The default suite on another torch of the supported range (pyproject.toml), in a
# virtual environment of its own, .venv-torch$(TORCH): `make test-torch TORCH=2.11.0`
# (the GPU machines' release), `TORCH=2.14.1`. pip takes the build its index gives (on
# PyPI a CUDA build of several GB; it runs on the CPU where there is no GPU).
TORCH ?= 2.14.1
TORCH_VENV := .venv-torch$(TORCH)

test-torch:
	test -x $(TORCH_VENV)/bin/python || $(PYTHON) -m venv $(TORCH_VENV)
	$(TORCH_VENV)/bin/pip install --quiet --upgrade pip
	$(TORCH_VENV)/bin/pip install --quiet "torch==$(TORCH)"
	$(TORCH_VENV)/bin/pip install --quiet -e ".[dev]"
	$(TORCH_VENV)/bin/python -c "import torch; print('torch', torch.__version__)"
	$(TORCH_VENV)/bin/python -m pytest -q -n $(TEST_WORKERS) --dist loadfile

# The wheels scripts/gpu_check.sh installs on a GPU machine that reaches no package
# registry (.whl/, carried with the working tree): `bash scripts/gpu_check.sh OUT pipeline`
# there runs the pipeline's GPU tests and measurements (docs/algorithms/pipeline.md).
gpu-wheels:
	bash scripts/gpu_wheels.sh

# Builds the wheel, installs it into a fresh environment outside the repository and
# runs gnnrun from an empty directory.
test-package: setup
	$(BIN)/python -m pytest -q -m package

# TensorBoard, MLflow and W&B for real (the tracking extras, installed here): a
# `mlflow server` and `tensorboard` started on loopback, W&B offline, screenshots of
# their pages by headless Chromium (installed with apt-get when missing; the screenshot
# tests skip without it). GNNRUN_SCREENSHOTS_DIR=docs/images refreshes the docs' images.
test-tracking: setup
	$(BIN)/pip install --quiet -e ".[tracking]"
	bash scripts/install_chromium.sh
	$(BIN)/python -m pytest -q -rs -m tracking

# Style, then the import contracts of pyproject.toml (layers, no cycles), then the
# documentation's links: mkdocs (mkdocs.yml, strict) for docs/, and
# tests/test_docs_links.py for README.md, CONTRIBUTING.md, CHANGELOG.md and benchmarks/
# (no --quiet for mkdocs: it hides the warnings that --strict counts).
lint: setup
	$(BIN)/ruff check gnnrun tests scripts
	$(BIN)/ruff format --check gnnrun tests scripts
	$(BIN)/lint-imports
	$(BIN)/mkdocs build --strict --site-dir build/site
	$(BIN)/python -m pytest -q tests/test_docs_links.py

format: setup
	$(BIN)/ruff check --fix gnnrun tests scripts
	$(BIN)/ruff format gnnrun tests scripts

bench-partition: setup
	$(BIN)/python scripts/bench_partition.py

bench-fullbatch: setup
	$(BIN)/python scripts/bench_fullbatch.py --memory

bench-train: setup
	$(BIN)/python scripts/bench_train.py

bench-hec: setup
	$(BIN)/python scripts/bench_hec.py

bench-sar: setup
	$(BIN)/python scripts/bench_sar.py --model sage_products --ranks 1,2,4
	$(BIN)/python scripts/bench_sar.py --model gat_products --ranks 1,2,4

bench-pipeline: setup
	$(BIN)/python scripts/bench_pipeline.py

# Four hosts (network namespaces), each held to 3 GiB by a cgroup v1 memory limit, prepare,
# partition and train one epoch on a chunked graph of 5M vertices and 120M edges; then one
# process partitions it with METIS under a 12 GiB limit. Needs root; about 8 GB of disk
# in BENCH_WORK, removed at the end; about 10 minutes on 2 cores. Not part of CI.
BENCH_WORK ?= /tmp/gnnrun-bounded-memory
bench-bounded-memory: setup
	$(BIN)/python scripts/bench_bounded_memory.py --work $(BENCH_WORK) --cleanup

# gnnrun beside PyG on this machine's device: its GPU (synthetic-medium and -large) where
# it has one, else the CPU (synthetic-small).
# Epoch time with each experiment tracker against none, in one run.
bench-tracking: setup
	$(BIN)/pip install --quiet -e ".[tracking]"
	$(BIN)/python scripts/bench_tracking.py

bench-gpu: setup
	$(BIN)/pip install --quiet "torch-geometric>=2.6"
	$(BIN)/python scripts/bench_gpu.py

# DGL 2.1 beside gnnrun, for the benchmarks' --dgl-python: in a venv of its own,
# since DGL 2.1 does not import on gnnrun's torch (torch 2.2.1 from the index is
# its CUDA build, which needs its nvidia-* libraries even on CPU: about 5 GB).
DGL_VENV := .dgl-venv
DGL_PYTHON := $(DGL_VENV)/bin/python

dgl-venv: $(DGL_VENV)/.installed

$(DGL_VENV)/.installed:
	$(PYTHON) -m venv $(DGL_VENV)
	$(DGL_VENV)/bin/pip install --quiet torch==2.2.1 dgl==2.1.0 "numpy<2" "setuptools<70" \
		torchdata==0.7.1 pandas pydantic scipy pyyaml psutil
	$(DGL_PYTHON) -c "import dgl, torch; print('dgl', dgl.__version__, 'torch', torch.__version__)"
	touch $@

# Every figure a ratio to DGL measured in the same run: aggregation, sampling, the
# minibatch step and the full-batch epochs.
bench-vs-dgl: setup dgl-venv
	$(BIN)/python scripts/bench_kernels.py --skip-index-add --dgl-python $(DGL_PYTHON)
	$(BIN)/python scripts/bench_sampler.py --dgl-python $(DGL_PYTHON)
	$(BIN)/python scripts/bench_train.py --fanouts 5 10 15 --dgl-python $(DGL_PYTHON)
	$(BIN)/python scripts/bench_fullbatch.py --skip-train --skip-sweep --dgl-python $(DGL_PYTHON)

# The project's scripts and the DGL peers' side_by_side.sh spmm,full, three runs each,
# alternating, in one table (docs/performance.md#checking-the-figures-with-a-second-harness).
PEERS_DIR ?= ../shared/peers
bench-vs-dgl-check: setup dgl-venv
	$(BIN)/python scripts/bench_vs_dgl_check.py --peers $(PEERS_DIR) --dgl-python $(DGL_PYTHON)

clean:
	rm -rf $(VENV) outputs
