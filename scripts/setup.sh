#!/usr/bin/env bash
# Idempotent set-up: apt packages, the .venv and the project installed into it (editable),
# the native record walk, and Airflow for the DAGs of airflow_dags/ in .venv-airflow.
set -euo pipefail
cd "$(dirname "$0")/.."

# chromium + chromium-driver: the console's browser tests (tests/clients/test_console_browser.py).
apt_packages=(kcat zookeeper chromium chromium-driver)
missing=()
for p in "${apt_packages[@]}"; do
    dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    if [ "$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null 2>&1 || PY=python3
if [ ! -x .venv/bin/python ]; then
    "$PY" -m venv .venv
fi
stamp=.venv/.loglake-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
    .venv/bin/python -m pip install -q --upgrade pip
    .venv/bin/python -m pip install -q -e '.[dev]'
    touch "$stamp"
fi

# The native record walk (a C shared library loaded with ctypes). Optional: without a C
# compiler this prints a note and loglake walks records in Python; it never fails set-up.
bash scripts/build_native.sh

# Airflow in a virtualenv of its own: its pins (fastapi<0.137) would downgrade the broker's
# fastapi in .venv. The DAGs run the jobs with .venv's spark-submit and python (docs/operations.md).
if [ ! -x .venv-airflow/bin/python ]; then
    "$PY" -m venv .venv-airflow
fi
airflow_stamp=.venv-airflow/.loglake-installed
if [ ! -f "$airflow_stamp" ] || [ airflow_dags/requirements.txt -nt "$airflow_stamp" ]; then
    .venv-airflow/bin/python -m pip install -q --upgrade pip
    .venv-airflow/bin/python -m pip install -q -r airflow_dags/requirements.txt
    touch "$airflow_stamp"
fi

# A class-data-sharing archive of Spark's JVM classes: every Spark JVM (jobs, tests, executors)
# then starts on about half the CPU (loglake/spark/class_archive.py). Built once per pyspark
# version; without it Spark starts as usual, so a failed build only warns.
.venv/bin/python -m loglake.spark.class_archive || echo "warning: no Spark class archive; Spark JVMs start without it" >&2
