# The two set-up commands are `make demo` and `make test`; both build .venv from scratch when it is missing.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test install lint typecheck unit integration bench bench-nexmark clean browser

# The web UI's browser tests drive Debian's chromium (Playwright cannot download a browser here); installed with
# apt-get only when it is missing.
CHROMIUM := /usr/bin/chromium

# The suite runs on three pytest-xdist workers, each with its own broker and SparkSession (docs/dev/testing.md):
# on two cores a third worker fills the time the others wait (14 min 50 s of pytest against 18-20 with two).
PYTEST_WORKERS ?= -n 3 --dist loadgroup

# The packages, without their bytecode: pip compiles a fresh virtualenv's packages on one core (~15 s); `bytecode`
# does it on every core, beside the class archive and the checks (`make test` runs them together).
$(STAMP): pyproject.toml
	$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 11), "Python 3.11+ needed"'
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet --no-compile -e '.[test]'
	$(BIN)/ethereal-kafka broker fetch
	touch $(STAMP)

# The class-data-sharing archive the embedded driver JVM maps (`ethereal-kafka spark-archive`, ~30 s): one per
# virtualenv, as it records the paths and times of the jars.
ARCHIVE := $(VENV)/.spark-archive
$(ARCHIVE): $(STAMP)
	$(BIN)/ethereal-kafka spark-archive
	touch $(ARCHIVE)

BYTECODE := $(VENV)/.bytecode
$(BYTECODE): $(STAMP)
	$(BIN)/python -m compileall -q -j 0 $(VENV)/lib >/dev/null
	touch $(BYTECODE)

install: $(ARCHIVE) $(BYTECODE)

demo: install
	$(BIN)/ethereal-kafka demo

lint: $(STAMP)
	$(BIN)/ruff check ethereal_kafka tests $(wildcard bench/*.py)
	$(BIN)/ruff format --check ethereal_kafka tests $(wildcard bench/*.py)

typecheck: $(STAMP)
	$(BIN)/mypy

browser:
	@test -x $(CHROMIUM) || { \
		echo "installing Debian's chromium for the web UI's browser tests"; \
		SUDO=$$(test "$$(id -u)" = 0 || echo sudo); \
		$$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq chromium >/dev/null; \
	}
	@test -x $(CHROMIUM) || { echo "FAIL: $(CHROMIUM) is missing"; exit 1; }

# Scratch files go under the run's folder, deleted at the end (kept when a test failed, but for Spark's): Spark's
# local folders (RocksDB working copies, block files) and Python's temporary files of every process the suite
# starts; a job killed with SIGKILL never deletes its own (~1,000 folders, up to 49 MB each, per run in /tmp).
test: $(STAMP)
	@$(MAKE) --no-print-directory -j 4 --output-sync=target lint typecheck browser $(ARCHIVE) $(BYTECODE)
	@run=$$(mktemp -d /tmp/ethereal-kafka-test-XXXXXX); mkdir -p $$run/tmp $$run/spark-local; \
	TMPDIR=$$run/tmp SPARK_LOCAL_DIRS=$$run/spark-local \
		$(BIN)/pytest tests $(PYTEST_WORKERS) --basetemp=$$run/pytest; status=$$?; \
	if pgrep -f "[e]thereal.kafka.broker.dir=$$run" >/dev/null; then \
		echo "FAIL: the test suite left a broker JVM running"; pgrep -af "[e]thereal.kafka.broker.dir=$$run"; exit 1; \
	else echo "ok: no broker JVM left running by the test suite"; fi; \
	rm -rf $$run/tmp $$run/spark-local; \
	if [ $$status = 0 ]; then rm -rf $$run; else echo "the failed run's files: $$run/pytest"; fi; \
	exit $$status

# Issue 12's side-by-side bench (docs/performance.md): 1M bids through ethereal-kafka and its peers, ~15 min on
# 2 cores; `make bench BENCH_ARGS="--records 50000"` for a short run. Quix Streams gets a virtualenv of its own.
BENCH_ARGS ?=
bench: install
	$(BIN)/python -m pip install --quiet -e '.[bench]'
	nice -n 19 $(BIN)/python bench/peers.py $(BENCH_ARGS)

# Issue 23's Nexmark bench (docs/performance.md): q5 q7 q8 and a windowed word count through ethereal-kafka, Spark's
# own engine and Flink (PyFlink SQL, its own virtualenv in the cache), 2M input events each, every output checked
# against a plain-Python answer; over an hour on 2 cores. A smoke run:
# `make bench-nexmark NEXMARK_ARGS="--events 30000 --queries q5 --systems ek,spark,flink-eos"`.
NEXMARK_ARGS ?=
bench-nexmark: install
	$(BIN)/python -m pip install --quiet -e '.[bench]'
	nice -n 19 $(BIN)/python bench/nexmark.py $(NEXMARK_ARGS)

unit: install
	$(BIN)/pytest tests/unit

integration: install browser
	$(BIN)/pytest tests/integration

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache *.egg-info
