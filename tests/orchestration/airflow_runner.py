"""Airflow's side of the tests, run by `.venv-airflow/bin/python` (Airflow is not in the test venv).

One process per test session, so Airflow is imported once: it reads one JSON request per line on
stdin and answers one JSON line on stdout. Airflow's own output goes to stderr.

    {"op": "parse", "variables": {...}}                  -> {"import_errors": {...}, "dags": {...}}
    {"op": "test", "dag_id": "...", "variables": {...}, "connections": {...}}
                                                      -> {"state": "...", "tasks": {task_id: state}}

`variables` is the JSON object of the Variable `loglake`, given as `AIRFLOW_VAR_LOGLAKE` (Airflow's
environment-variable backend, which DAG parsing and tasks both read), and `connections` (optional)
maps connection ids to their JSON form, given as `AIRFLOW_CONN_<ID>`; the DAG files are parsed anew
for each request, so each sees its own.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from pathlib import Path
from typing import Any

DAGS = Path(__file__).resolve().parents[2] / "airflow_dags"
# What DAG files must not import: parsing happens often, and these belong to the jobs.
HEAVY_MODULES = ("pyspark", "loglake", "deltalake", "jobs")


def dag_bag() -> Any:
    from airflow.dag_processing.dagbag import BundleDagBag

    # As the DAG processor and the task runner parse them: the DAG folder is on sys.path.
    return BundleDagBag(DAGS, bundle_path=DAGS)


def describe(dag: Any) -> dict[str, Any]:
    tasks = {}
    for task in dag.tasks:
        timeout = task.execution_timeout
        tasks[task.task_id] = {
            "application": task.application,
            "application_args": task.application_args,
            "conn_id": task._conn_id,
            "retries": task.retries,
            "execution_timeout_s": None if timeout is None else timeout.total_seconds(),
            "doc_md": task.doc_md,
        }
    return {
        "schedule": str(dag.schedule),
        "catchup": dag.catchup,
        "max_active_runs": dag.max_active_runs,
        "deadlines": [(alert.interval.total_seconds(), alert.callback.path) for alert in dag.deadline or []],
        "doc_md": dag.doc_md,
        "tasks": tasks,
    }


def handle(request: dict[str, Any]) -> dict[str, Any]:
    os.environ["AIRFLOW_VAR_LOGLAKE"] = json.dumps(request.get("variables", {}))
    for name in [name for name in os.environ if name.startswith("AIRFLOW_CONN_")]:
        del os.environ[name]
    for conn_id, connection in request.get("connections", {}).items():
        os.environ[f"AIRFLOW_CONN_{conn_id.upper()}"] = json.dumps(connection)
    bag = dag_bag()
    if request["op"] == "parse":
        return {
            "import_errors": bag.import_errors,
            "dags": {i: describe(d) for i, d in bag.dags.items()},
            "heavy_modules": sorted(m for m in HEAVY_MODULES if m in sys.modules),
        }
    if request["op"] == "test":
        if bag.import_errors:
            return {"error": f"import errors: {bag.import_errors}"}
        run = bag.dags[request["dag_id"]].test()
        return {"state": str(run.state), "tasks": {ti.task_id: str(ti.state) for ti in run.get_task_instances()}}
    return {"error": f"unknown op {request['op']!r}"}


def main() -> None:
    answers = os.fdopen(os.dup(sys.stdout.fileno()), "w")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())  # Airflow's (and spark-submit's) output to stderr
    import airflow  # noqa: F401  (once, before the first request)

    answers.write(json.dumps({"ready": True}) + "\n")
    answers.flush()
    for line in sys.stdin:
        try:
            answer = handle(json.loads(line))
        except Exception:
            answer = {"error": traceback.format_exc()}
        answers.write(json.dumps(answer, default=str) + "\n")
        answers.flush()


if __name__ == "__main__":
    main()
