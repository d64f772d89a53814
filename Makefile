# steadax: `make demo` and `make test` work on a fresh machine with Python 3.11 and make.
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
PYTEST_WORKERS ?= auto

.PHONY: optax-docstrings demo example docs typecheck test test-x64 test-fast bench device clean mutate fuzz clients optax-tests

$(VENV)/.created:
	@command -v $(PYTHON) >/dev/null 2>&1 || { echo "$(PYTHON) not found; set PYTHON=python3"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip
	touch $@

$(VENV)/.dev: $(VENV)/.created pyproject.toml
	$(PIP) install --quiet -e '.[dev]'
	touch $@

$(VENV)/.bench: $(VENV)/.created pyproject.toml
	$(PIP) install --quiet -e '.[bench]'
	touch $@

$(VENV)/.clients: $(VENV)/.created pyproject.toml
	$(PIP) install --quiet -e '.[dev,clients]'
	touch $@

$(VENV)/.examples: $(VENV)/.created pyproject.toml
	$(PIP) install --quiet -e '.[examples]'
	touch $@

demo: $(VENV)/.examples
	$(PY) examples/demo.py

# One example in the project's venv with the examples extra: make example NAME=fsdp ARGS="--steps 8".
# (A bare `python examples/x.py` runs whichever python is first on PATH, which may lack steadax,
# flax or equinox; `.venv/bin/python examples/x.py` works once this target has created the venv.)
example: $(VENV)/.examples
	@test -n "$(NAME)" || { echo "usage: make example NAME=<examples/NAME.py> [ARGS=...]"; exit 2; }
	$(PY) examples/$(NAME).py $(ARGS)

# The documentation site (mkdocs.yml): pages from docs/, API pages from the docstrings. Strict:
# broken links, missing cross-references and docstring warnings fail the build. Output in site/
# (git-ignored). Not --quiet: it hides the warnings from strict mode, which then passes.
docs: $(VENV)/.dev
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --site-dir site

# pyright in basic mode on src/ ([tool.pyright] in pyproject.toml); clean, and part of make test
# (about 20 CPU-s; the docs build about 15-20).
typecheck: $(VENV)/.dev
	$(VENV)/bin/pyright --pythonpath $(PY)

# The whole suite, in both x64 modes (x64 runs as a second pytest process). XLA compilation is most
# of the suite's time: both passes and all workers share one persistent compilation cache, in a
# temporary directory removed afterwards (a program with the same HLO is compiled once; about half
# of the x64 pass's programs are the x64-off pass's).
test: $(VENV)/.dev docs typecheck
	@cache=$$(mktemp -d) && trap 'rm -rf "$$cache"' EXIT && \
	export JAX_COMPILATION_CACHE_DIR="$$cache" JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS=0 \
	  JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES=0 && \
	echo "JAX_ENABLE_X64=0 pytest --doctest-modules src tests" && \
	JAX_ENABLE_X64=0 $(PY) -m pytest -q -n $(PYTEST_WORKERS) -p no:cacheprovider --durations=15 --doctest-modules src tests && \
	echo "JAX_ENABLE_X64=1 pytest -m 'not x32_only' tests" && \
	JAX_ENABLE_X64=1 $(PY) -m pytest -q -n $(PYTEST_WORKERS) -p no:cacheprovider --durations=15 -m "not x32_only" tests

# The property tests (tests/property) with random (not derandomized) examples, STEADAX_FUZZ times as
# many as make test's fixed handful, in both x64 modes.
STEADAX_FUZZ ?= 20
fuzz: $(VENV)/.dev
	STEADAX_FUZZ=$(STEADAX_FUZZ) JAX_ENABLE_X64=0 $(PY) -m pytest -q -n 0 -p no:cacheprovider tests/property && \
	STEADAX_FUZZ=$(STEADAX_FUZZ) JAX_ENABLE_X64=1 $(PY) -m pytest -q -n 0 -p no:cacheprovider tests/property

# Mutation testing of the dtype policy on a temporary copy of src/ (tests/mutation/run.py): fails
# when an injected dtype bug is not caught by its tests.
mutate: $(VENV)/.dev
	$(PY) tests/mutation/run.py

$(VENV)/.optax-tests: $(VENV)/.created pyproject.toml
	$(PIP) install --quiet -e '.[optax-tests]'
	touch $@

# Optax 0.2.8's own test files run against steadax's public API (tools/optax_tests.py): once with
# Optax, once with steadax; prints the tests excluded (Optax private helpers), how many pass with
# Optax, how many of those pass with steadax, and each difference. Slow (not part of make test).
# OPTAX_TESTS_ARGS: e.g. --files 'losses/*' -k softmax, --reuse-optax; see --help.
OPTAX_TESTS_ARGS ?=
optax-tests: $(VENV)/.optax-tests
	$(PY) tools/optax_tests.py -n 2 $(OPTAX_TESTS_ARGS)

# Optax 0.2.8's own docstring examples (93 blocks, 842 examples) run with Optax and with optax
# resolved to steadax (tools/optax_docstrings.py); fails on a difference not documented in its KNOWN
# table. A few minutes; not part of make test.
optax-docstrings: $(VENV)/.optax-tests
	$(PY) tools/optax_docstrings.py

# steadax against Optax (benchmarks/run.py). Writes
# benchmarks/results/<machine>-<date>.{json,png} and the README's benchmark section.
# BENCH_ARGS: --quick (a few minutes), --cases big,lbfgs, --no-readme; see --help.
BENCH_ARGS ?=
bench: $(VENV)/.bench
	$(PY) -m benchmarks.run $(BENCH_ARGS)

# steadax on an accelerator in one call (docs/performance.md, "On a GPU"): device.json and device.md
# in OUT, within 8 minutes. Runs with the python that has JAX with CUDA (no venv, no installs, no
# network): make device OUT=/tmp/dev [DEVICE_PYTHON=python3] [DEVICE_ARGS=--dry-run]
# (DEVICE_PYTHON default: the first python on PATH).
DEVICE_ARGS ?=
DEVICE_PYTHON ?=
device:
	@test -n "$(OUT)" || { echo "usage: make device OUT=<directory> [DEVICE_ARGS=--dry-run]"; exit 2; }
	PYTHON=$(DEVICE_PYTHON) benchmarks/device.sh $(DEVICE_ARGS) $(OUT)

# Libraries built on Optax (NumPyro, GPJax, BlackJAX, FlowJAX) run the tests of theirs that use
# Optax twice, with Optax and under `python -m steadax.as_optax` (tools/clients/run.py): a table per
# library; fails when a test passing with Optax does not pass with steadax. Slow (tens of minutes):
# not part of make test. Their sources are downloaded once into .clients/.
CLIENTS_ARGS ?=
clients: $(VENV)/.clients
	$(PY) tools/clients/run.py $(CLIENTS_ARGS)

clean:
	rm -rf $(VENV) .pytest_cache build dist src/*.egg-info .clients
