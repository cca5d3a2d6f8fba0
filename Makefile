# disttrain: `make demo` runs the whole pipeline on one machine, `make test` the tests that need no Docker or fault injection.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# the kserve SDK's own venv: a test client that pins protobuf<7 (tests/server/kserve_client_calls.py)
KSERVE_BIN := .venv-kserve/bin
# KServe's storage initializer (kserve-storage) in its own venv: a test downloads a published model with it
KSERVE_STORAGE_BIN := .venv-kserve-storage/bin
# the Kubeflow Pipelines SDK's own venv (kfp pins protobuf<7): compiles and runs pipelines/kfp (requirements-kfp.txt)
KFP_BIN := .venv-kfp/bin
# the docs site's own venv: MkDocs and Material for MkDocs, pinned in requirements-docs.txt (make docs)
DOCS_BIN := .venv-docs/bin
COMPONENTS := contract copier trainer advisor sweep aggregator server

# make demo variables
TASK ?= movie-reviews
WORKERS ?= 2
EPOCHS ?=
BATCH ?=
STRATEGY ?=
SYNC_EVERY ?=
PS ?= 1
COMBINE ?= average
VALIDATION ?=
PORT ?= 8080
# make demo and make pipeline run in workdir/demo, make sweep in workdir/sweep-$(TASK), unless WORKDIR is given
WORKDIR ?= workdir/demo
SWEEP_WORKDIR := $(if $(filter file,$(origin WORKDIR)),workdir/sweep-$(TASK),$(WORKDIR))
S3_WORKDIR := $(if $(filter file,$(origin WORKDIR)),workdir/demo-s3,$(WORKDIR))
# make sweep variables
TRIALS ?= 12
PARALLEL ?= 2
SWEEP_ARGS ?=
# your own data and model: make demo SOURCE=table:my.csv LABEL_COLUMN=target MODEL_FILE=my.keras (MODEL_MODULE=mymodels)
SOURCE ?=
LABEL_COLUMN ?=
PROBLEM ?=
MODEL_FILE ?=
MODEL_MODULE ?=
# the aggregator's quality gate (make demo, pipeline, sweep, demo-s3); empty: the aggregator's defaults
MAX_DROP_VS_BEST_WORKER ?=
MAX_REGRESSION ?=
MIN_GAIN_VS_TRIVIAL ?=
MAX_RELATIVE_DROP_VS_BEST_WORKER ?=
MAX_RELATIVE_REGRESSION ?=
MIN_RELATIVE_GAIN_VS_TRIVIAL ?=
FORCE ?=
GATE_VARIABLES := MAX_DROP_VS_BEST_WORKER MAX_REGRESSION MIN_GAIN_VS_TRIVIAL MAX_RELATIVE_DROP_VS_BEST_WORKER \
  MAX_RELATIVE_REGRESSION MIN_RELATIVE_GAIN_VS_TRIVIAL FORCE
GATE := $(foreach v,$(GATE_VARIABLES),$(v)=$($(v)))

# every one of these is in `make help` (tests/unit/test_makefile.py checks it)
.PHONY: help lint venv venv-kserve venv-kserve-storage venv-kfp kfp-pipeline docs docs-venv docs-gen demo demo-s3 pipeline sweep test test-long test-faults test-load front-deps test-images test-cluster images push bench bench-quick browser-deps clean

help:
	@echo "make demo     copier -> $(WORKERS) trainers -> aggregator -> server on http://127.0.0.1:$(PORT)/"
	@echo "              variables: TASK=movie-reviews|digits|faces WORKERS=2 EPOCHS BATCH STRATEGY=average|multiworker|localsgd|parameterserver SYNC_EVERY PS=1 PORT=8080 "
	@echo "              your data and model: SOURCE=table:my.csv LABEL_COLUMN=label PROBLEM=classification|regression MODEL_FILE=my.keras MODEL_MODULE=mymodels[:build]"
	@echo "              COMBINE=average|ensemble|best (average strategy; best: VALIDATION=0.1 by default, the trainers' validation split)"
	@echo "              WORKDIR=workdir/demo (where the data, checkpoints, logs and the published model go)"
	@echo "              the quality gate (empty: the aggregator's defaults), in accuracy points: MAX_DROP_VS_BEST_WORKER=1"
	@echo "              MAX_REGRESSION=1 (vs the published model) MIN_GAIN_VS_TRIVIAL=1 (above the majority class; faces: chance);"
	@echo "              regression, in percent of RMSE: MAX_RELATIVE_DROP_VS_BEST_WORKER=5 MAX_RELATIVE_REGRESSION=5"
	@echo "              MIN_RELATIVE_GAIN_VS_TRIVIAL=1 (below the training mean's); FORCE=1 publishes a refused model"
	@echo "make pipeline the same as make demo without the server (same variables)"
	@echo "make demo-s3  make pipeline with its input in an S3 store: SeaweedFS on loopback, the breast-cancer table from"
	@echo "              s3://demo/tables/breast_cancer.csv (docs: Object storage); in WORKDIR (default workdir/demo-s3)"
	@echo "make sweep    copier -> Optuna sweep (TRIALS=12 PARALLEL=2 processes, SWEEP_ARGS) -> trainers with its best.json -> aggregator"
	@echo "              in WORKDIR (default workdir/sweep-TASK)"
	@echo "make venv     the virtualenv .venv (requirements.txt, requirements-dev.txt, the components editable); every target that needs it builds it"
	@echo "make venv-kserve  .venv-kserve, the kserve SDK's own virtualenv for two test clients (make test and test-long build it)"
	@echo "make venv-kserve-storage  .venv-kserve-storage, KServe's storage initializer for the publishing test (make test builds it)"
	@echo "make venv-kfp     .venv-kfp, the Kubeflow Pipelines SDK's own virtualenv (make test and test-images build it)"
	@echo "make kfp-pipeline recompile pipelines/kfp/pipeline.yaml from pipeline.py (make test fails while they differ)"
	@echo "make browser-deps Debian's chromium and curl, which make test drives (needs root; otherwise names the sudo command)"
	@echo "make front-deps   Debian's nginx (nginx-light), the server's front against slow clients, which make test-faults runs (needs root)"
	@echo "make lint         ruff format --check and ruff check over every Python file (ruff.toml); quick, run first by CI"
	@echo "make test         unit, integration, resume, faces, server, browser, chart (11-14 min on 2 cores; not the targets below)"
	@echo "make test-long    longer real-training integration tests (sweeps, multi-model runs) kept out of make test's 15-minute budget"
	@echo "make test-faults  fault injection: kill -9 trainers, kill gunicorn workers, API fuzz, full disk, slow clients (installs nginx-light)"
	@echo "make test-load    the server under load: 10,000 concurrent requests per endpoint, each answer the serial one"
	@echo "make test-images  build the five images and run the pipeline with docker run only (starts dockerd)"
	@echo "make test-cluster run the chart's helm template output with the images as a cluster would (starts dockerd)"
	@echo "make images       build disttrain-{copier,trainer,aggregator,server}:$(TAG)"
	@echo "make push REGISTRY=registry.example.com/team   tag and push them"
	@echo "make bench        benchmarks -> bench/results/*.json, bench/plots/*.png, bench/README.md"
	@echo "make bench-quick  the same with one repetition and fewer requests: provisional numbers in about 8 minutes"
	@echo "make docs         the docs site: regenerate docs/reference and docs/benchmarks/results.md, then mkdocs build --strict into site/"
	@echo "make docs-gen     only regenerate the generated docs pages (chart values, each stage's --help, benchmark results)"
	@echo "make docs-venv    only build .venv-docs (MkDocs and Material, pinned in requirements-docs.txt)"
	@echo "make clean    remove the virtualenvs and working directories"
	@echo "make help     this list"
	@echo "DISTTRAIN_LOG_LEVEL=debug make demo   keep TensorFlow's own start-up lines (hidden by default)"

# The virtualenv is rebuilt when a pin or a component's metadata changes.
$(BIN)/.installed: requirements.txt requirements-dev.txt $(foreach c,$(COMPONENTS),components/$(c)/pyproject.toml)
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -r requirements.txt -r requirements-dev.txt
	@# setuptools warns on every editable install that a folder named like the package could
	@# shadow it; ours are laid out for exactly that, and the five warnings read like errors
	PYTHONWARNINGS="ignore:Editable installation" $(BIN)/pip install --quiet --no-deps $(foreach c,$(COMPONENTS),-e components/$(c))
	touch $@

# A tool's own venv (BIN directory, requirements file): the exact pins of the file, installed without
# resolving (--no-deps: the file lists every package), then checked for consistency.
define side_venv
$(1)/.installed: $(2)
	test -x $(1)/python || $$(PYTHON) -m venv $(patsubst %/bin,%,$(1))
	$(1)/pip install --quiet --upgrade pip
	$(1)/pip install --quiet --no-deps -r $(2)
	$(1)/pip check
	touch $$@
endef
$(eval $(call side_venv,$(KSERVE_BIN),requirements-kserve.txt))
$(eval $(call side_venv,$(KSERVE_STORAGE_BIN),requirements-kserve-storage.txt))
$(eval $(call side_venv,$(KFP_BIN),requirements-kfp.txt))
$(eval $(call side_venv,$(DOCS_BIN),requirements-docs.txt))

venv: $(BIN)/.installed

# only the tests that run the kserve SDK need it (tests/kserve_venv.py): not make demo
venv-kserve: $(KSERVE_BIN)/.installed

venv-kserve-storage: $(KSERVE_STORAGE_BIN)/.installed

# compiling needs only the SDK; tests/kfp and tests/images/test_kfp_local.py run it
venv-kfp: $(KFP_BIN)/.installed

kfp-pipeline: venv-kfp
	$(KFP_BIN)/python pipelines/kfp/pipeline.py

docs-venv: $(DOCS_BIN)/.installed

# The generated pages (chart values, each stage's --help, benchmark results and plots) need the
# stages installed, hence .venv; tests/docs fails when the checked-in copies are stale.
docs-gen: venv
	$(BIN)/python scripts/gen_docs.py

docs: docs-gen docs-venv
	NO_MKDOCS_2_WARNING=1 $(DOCS_BIN)/mkdocs build --strict

demo: venv
	SOURCE=$(SOURCE) LABEL_COLUMN=$(LABEL_COLUMN) PROBLEM=$(PROBLEM) MODEL_FILE=$(MODEL_FILE) MODEL_MODULE=$(MODEL_MODULE) \
	TASK=$(TASK) WORKERS=$(WORKERS) EPOCHS=$(EPOCHS) BATCH=$(BATCH) STRATEGY=$(STRATEGY) SYNC_EVERY=$(SYNC_EVERY) PS=$(PS) PORT=$(PORT) COMBINE=$(COMBINE) VALIDATION=$(VALIDATION) \
	  $(GATE) WORKDIR=$(WORKDIR) BIN=$(BIN) scripts/run-local.sh

# the same as demo without the server (used to measure the README's table)
pipeline: venv
	SOURCE=$(SOURCE) LABEL_COLUMN=$(LABEL_COLUMN) PROBLEM=$(PROBLEM) MODEL_FILE=$(MODEL_FILE) MODEL_MODULE=$(MODEL_MODULE) \
	TASK=$(TASK) WORKERS=$(WORKERS) EPOCHS=$(EPOCHS) BATCH=$(BATCH) STRATEGY=$(STRATEGY) SYNC_EVERY=$(SYNC_EVERY) PS=$(PS) COMBINE=$(COMBINE) VALIDATION=$(VALIDATION) \
	  $(GATE) WORKDIR=$(WORKDIR) BIN=$(BIN) SERVE=0 scripts/run-local.sh

# the pipeline reading its table from an S3 store (SeaweedFS on loopback): scripts/demo_s3.py
demo-s3: venv
	MODEL_FILE=$(MODEL_FILE) MODEL_MODULE=$(MODEL_MODULE) WORKERS=$(WORKERS) EPOCHS=$(EPOCHS) BATCH=$(BATCH) STRATEGY=$(STRATEGY) \
	SYNC_EVERY=$(SYNC_EVERY) PS=$(PS) COMBINE=$(COMBINE) VALIDATION=$(VALIDATION) WORKDIR=$(S3_WORKDIR) BIN=$(BIN) \
	  $(GATE) $(BIN)/python scripts/demo_s3.py

# the pipeline with a hyper-parameter sweep between copier and trainers (components/sweep)
sweep: venv
	TASK=$(TASK) WORKERS=$(WORKERS) EPOCHS=$(EPOCHS) BATCH=$(BATCH) STRATEGY=$(STRATEGY) SYNC_EVERY=$(SYNC_EVERY) PS=$(PS) \
	  WORKDIR=$(SWEEP_WORKDIR) BIN=$(BIN) SERVE=0 SWEEP=1 TRIALS=$(TRIALS) PARALLEL=$(PARALLEL) SWEEP_ARGS="$(SWEEP_ARGS)" \
	  $(GATE) scripts/run-local.sh

# ruff's rule set and the reasons for it are in ruff.toml
lint: venv
	$(BIN)/ruff format --check
	$(BIN)/ruff check

# Debian's Chromium for the browser test (Playwright drives it; never `playwright install`), and curl, which
# the TF Serving test runs as TF Serving's docs do. Installing needs root: anyone else is told the command.
BROWSER_DEPS := chromium curl
browser-deps:
	@missing=; for p in $(BROWSER_DEPS); do command -v $$p >/dev/null || missing="$${missing:+$$missing }$$p"; done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" != 0 ]; then \
	    echo "make test needs $$missing, and installing it needs root: run \`sudo apt-get install -y $$missing\` first" >&2; exit 1; \
	  fi; \
	  apt-get update -q && apt-get install -y -q $$missing; \
	fi

# tests/images runs only under `make test-images`, tests/cluster's Docker runs only under
# `make test-cluster`; the fault tests only under `make test-faults`.
test: venv venv-kserve venv-kserve-storage venv-kfp browser-deps
	$(BIN)/python -m pytest tests -q -m "not faults and not long and not load" --durations=20

# Real-training integration tests too long for make test's ~15-minute budget on 2 cores.
# pytest exits 5 when no test carries the marker: that is an empty target, not a failure.
# LONG_TESTS (default: all of tests/) and LONG_ARGS narrow it: CI runs two parts of it, one in each of its chains.
LONG_TESTS ?= tests
test-long: venv venv-kserve
	$(BIN)/python -m pytest $(LONG_TESTS) -q -m long --durations=10 $(LONG_ARGS) || [ $$? -eq 5 ]

test-faults: venv front-deps
	$(BIN)/python -m pytest tests/faults -q -m faults --durations=10

# The server's load goals: 10,000 concurrent requests per endpoint, every answer the serial one (make test sends 320).
test-load: venv
	$(BIN)/python -m pytest tests/faults -q -m load --durations=10

# Debian's nginx-light (Debian 13 dropped it: its nginx is that build): the server's front (--front nginx), which the slow-client fault test runs for real.
# Its service is kept from starting on install (policy-rc.d 101): only the server starts nginx, on its own port.
front-deps:
	@if ! command -v nginx >/dev/null && [ ! -x /usr/sbin/nginx ]; then \
	  if [ "$$(id -u)" != 0 ]; then \
	    echo "make test-faults needs nginx, and installing it needs root: run \`sudo apt-get install -y nginx-light\` first" >&2; exit 1; \
	  fi; \
	  policy=; [ -e /usr/sbin/policy-rc.d ] || { printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d && policy=1; }; \
	  apt-get update -q && { apt-get install -y -q --no-install-recommends nginx-light || apt-get install -y -q --no-install-recommends nginx; }; status=$$?; \
	  [ -z "$$policy" ] || rm -f /usr/sbin/policy-rc.d; exit $$status; \
	fi

TAG ?= latest
images:
	DISTTRAIN_IMAGE_TAG=$(TAG) bash docker/build-images.sh

push:
	@test -n "$(REGISTRY)" || { echo "usage: make push REGISTRY=registry.example.com/team [TAG=latest]"; exit 2; }
	REGISTRY=$(REGISTRY) DISTTRAIN_IMAGE_TAG=$(TAG) bash docker/push-images.sh

test-images: venv venv-kfp
	PYTHON=$(BIN)/python DISTTRAIN_IMAGE_TAG=$(TAG) bash docker/test-images.sh

# every release of tests/cluster/cluster_runs.py, from `helm template` to a served model
test-cluster: venv
	PYTHON=$(BIN)/python DISTTRAIN_IMAGE_TAG=$(TAG) bash docker/test-images.sh cluster

bench: venv
	bash bench/run_all.sh

# one repetition, fewer requests: provisional numbers in about 8 minutes
bench-quick: venv
	BENCH_QUICK=1 bash bench/run_all.sh

clean:
	rm -rf $(VENV) .venv-kserve .venv-kserve-storage .venv-kfp .venv-docs site workdir
