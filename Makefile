# The two commands of the README: `make demo` and `make test`. Both set up first.
PY := .venv/bin/python

.PHONY: setup native demo lint test test-fast bench cluster cluster-down cluster-status

setup:
	bash scripts/setup.sh

# The native libraries alone (the record walk, HTTP produce's encoding; setup builds them too); optional, see docs/operations.md.
native:
	bash scripts/build_native.sh

demo: setup
	$(PY) scripts/demo.py

# The checked tree: ruff's lint and format rules and mypy (its files and settings are in pyproject.toml).
LINT_PATHS := platform ingest_gateway harness jobs bench

lint: setup
	$(PY) -m ruff check $(LINT_PATHS)
	$(PY) -m ruff format --check $(LINT_PATHS)
	$(PY) -m mypy

test: setup lint
	$(PY) -m pytest

test-fast: setup
	$(PY) -m pytest -m "not slow"

cluster: setup
	$(PY) scripts/cluster.py up

cluster-down:
	$(PY) scripts/cluster.py down

cluster-status:
	$(PY) scripts/cluster.py status

bench: setup
	$(PY) bench/append.py
	$(PY) bench/read.py
	$(PY) -m bench.http_produce
	$(PY) -m bench.kafka_produce
	$(PY) -m bench.kafka_produce --small
	$(PY) -m bench.kafka_consume
	$(PY) -m bench.latency
	$(PY) -m bench.replicated_produce
	$(PY) -m bench.retention
	$(PY) -m bench.record_walk
	$(PY) -m bench.spark_read
	$(PY) -m bench.delta_sink
	$(PY) -m bench.rebalance
	$(PY) -m bench.control_plane
