# The two commands a new user runs: `make serve` and `make test`. Both create .venv when needed.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

# The suite runs against PostgreSQL and Redis on this machine unless told otherwise.
TEST_DATABASE_URL ?= postgresql://postgres@127.0.0.1:5432/postgres
TEST_REDIS_URL ?= redis://127.0.0.1:6379/0

.PHONY: install serve test lint bench clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test,lint]'
	touch $(STAMP)

install: $(STAMP)

serve: $(STAMP)
	$(BIN)/dandizarr serve

test: $(STAMP)
	DATABASE_URL=$${DATABASE_URL:-$(TEST_DATABASE_URL)} \
	DANDIZARR_TEST_REDIS_URL=$${DANDIZARR_TEST_REDIS_URL:-$(TEST_REDIS_URL)} \
	$(BIN)/pytest $(ARGS)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy .

bench: $(STAMP)
	$(BIN)/python -m bench

clean:
	rm -rf $(VENV) var .pytest_cache .mypy_cache .ruff_cache
