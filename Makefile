# The two commands of the README: `make demo` and `make test`. Both set up first.
PY := .venv/bin/python

.PHONY: setup demo test test-fast bench

setup:
	bash scripts/setup.sh

demo: setup
	$(PY) scripts/demo.py

test: setup
	$(PY) -m pytest

test-fast: setup
	$(PY) -m pytest -m "not slow"

bench: setup
	$(PY) bench/append.py
	$(PY) bench/read.py
	$(PY) bench/http_produce.py
