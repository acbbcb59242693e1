# The two entry points of the README: `make demo` and `make test`. Each sets everything up on a
# fresh machine first: a virtual environment in .venv with the pinned dependencies, and (for the
# tests) the command-line tar writers that the differential tests compare against, and the
# JPEG encoder cjpeg that the image tests encode with.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
DEBIAN_TOOLS := tar bsdtar:libarchive-tools gzip bzip2 xz:xz-utils zstd cjpeg:libjpeg-turbo-progs

# Processes that run the whole suite (pytest-xdist), one per core of the 2-core machines the
# project runs on; the 15 slowest tests are listed, to keep the run under 10 minutes.
TEST_WORKERS ?= 2

# The second environment: the same pins but torchdata 0.11 (StatefulDataLoader and
# torchdata.nodes, no DataLoader2), where `make test` runs the tests of loaders and nodes again
# (the marks loaders and torchdata; those marked dataloader2 are skipped there, and those marked
# ray are left out: Ray is installed in .venv only, where they run): about 4 minutes
# of CPU, 3 minutes on 2 busy cores, beside the 9 of the whole suite.
VENV_TD11 ?= .venv-torchdata-0.11
BIN_TD11 := $(VENV_TD11)/bin

.PHONY: demo test test-torchdata-0.11 test-fast lint setup setup-torchdata-0.11 test-tools

demo: setup
	$(BIN)/python -m wdspipes.demo

test: setup test-tools lint test-torchdata-0.11
	$(BIN)/pytest -n $(TEST_WORKERS) --dist worksteal --durations=15

test-torchdata-0.11: setup-torchdata-0.11 test-tools
	$(BIN_TD11)/pytest -q -n $(TEST_WORKERS) --dist worksteal --durations=5 -m "(loaders or torchdata) and not ray" tests

# The edit-test loop: every test that starts no worker process and no Python process (no loader
# workers, no command, no script) and does not build the docs site; under a minute. The tar
# writers the differential tests compare against run here too (tests/conftest.py keeps the tiers).
test-fast: setup test-tools
	$(BIN)/pytest -q -m "not loaders and not slow"

lint: setup
	$(BIN)/ruff check wdspipes tests benchmarks examples
	$(BIN)/ruff format --check wdspipes tests benchmarks examples
	$(BIN)/mypy

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml requirements/common.txt requirements/dev.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet -r requirements/dev.txt
	$(BIN)/python -m pip install --quiet --no-deps --no-build-isolation -e .
	touch $@

setup-torchdata-0.11: $(VENV_TD11)/.installed

$(VENV_TD11)/.installed: pyproject.toml requirements/common.txt requirements/torchdata-0.11.txt
	$(PYTHON) -m venv $(VENV_TD11)
	$(BIN_TD11)/python -m pip install --quiet -r requirements/torchdata-0.11.txt
	$(BIN_TD11)/python -m pip install --quiet --no-deps --no-build-isolation -e .
	touch $@

# Installs missing shard writers with apt-get when running as root (as CI does); elsewhere it
# names what to install. Tests that need a missing tool fail and say so.
test-tools:
	@missing=""; for spec in $(DEBIAN_TOOLS); do \
	  cmd=$${spec%%:*}; pkg=$${spec##*:}; \
	  command -v $$cmd >/dev/null 2>&1 || missing="$$missing $$pkg"; \
	done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing:$$missing"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	  else \
	    echo "missing shard writers:$$missing (install them, e.g. apt-get install$$missing)"; \
	  fi; \
	fi
