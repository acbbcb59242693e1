# The two entry points of the README: `make demo` and `make test`. Each sets up what it needs on
# a fresh machine first, in one virtual environment, .venv: `make demo` the runtime dependencies
# (requirements/demo.txt), `make test` (and lint, test-fast) everything (requirements/dev.txt,
# which includes demo.txt), and, for the tests, the command-line tar writers that the
# differential tests compare against, and the JPEG encoder cjpeg that the image tests encode
# with. A stamp file in .venv records each set-up: `make demo` after `make test` installs
# nothing, `make test` after `make demo` adds the rest.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PIP := $(BIN)/python -m pip --disable-pip-version-check
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

.PHONY: demo test test-torchdata-0.11 test-fast lint setup setup-demo setup-torchdata-0.11 test-tools

demo: setup-demo
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
	$(BIN)/ruff check wdspipes wdspipes_command.py tests benchmarks examples
	$(BIN)/ruff format --check wdspipes wdspipes_command.py tests benchmarks examples
	$(BIN)/mypy

setup-demo: $(VENV)/.demo-installed

setup: $(VENV)/.installed

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# The demo's set-up compiles no .pyc ahead (--no-compile): Python compiles the modules the demo
# imports when it first imports them, a second or two, instead of every module of torch and
# sympy at install, some 20 s (benchmarks/README.md, "Set-up of make demo").
$(VENV)/.demo-installed: pyproject.toml requirements/base.txt requirements/demo.txt | $(BIN)/python
	$(PIP) install --quiet --no-compile -r requirements/demo.txt
	$(PIP) install --quiet --no-deps --no-build-isolation -e .
	touch $@

# Everything, into the same .venv. After the demo's set-up, what it installed is compiled here,
# as pip would have, so that test processes do not compile torch as they start where bytecode
# is not written (PYTHONDONTWRITEBYTECODE); files that do not compile are skipped, as pip skips
# them (torch ships one for Python 3.12 only).
$(VENV)/.installed: pyproject.toml requirements/base.txt requirements/demo.txt requirements/common.txt requirements/dev.txt | $(BIN)/python
	$(PIP) install --quiet -r requirements/dev.txt
	$(PIP) install --quiet --no-deps --no-build-isolation -e .
	if [ -e $(VENV)/.demo-installed ]; then $(BIN)/python -c \
	  'import compileall, sysconfig; compileall.compile_dir(sysconfig.get_path("purelib"), quiet=2)'; fi
	touch $(VENV)/.demo-installed $@

setup-torchdata-0.11: $(VENV_TD11)/.installed

$(VENV_TD11)/.installed: pyproject.toml requirements/base.txt requirements/common.txt requirements/torchdata-0.11.txt
	$(PYTHON) -m venv $(VENV_TD11)
	$(BIN_TD11)/python -m pip install --disable-pip-version-check --quiet -r requirements/torchdata-0.11.txt
	$(BIN_TD11)/python -m pip install --disable-pip-version-check --quiet --no-deps --no-build-isolation -e .
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
