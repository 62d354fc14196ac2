"""What the loglake DAGs share: their settings, the Spark submit of a job of `jobs/`, and the DAG around it.

Settings are the keys of `conf/airflow.properties`, overridden by the Airflow Variable `loglake`
(a JSON object of the same keys: one Variable read per DAG file parse, as Airflow's best practices
advise). A key prefixed with the DAG's short name (`delta_sink.retries`) wins over the plain key.

This module imports Airflow and reads `conf/`, nothing heavier: DAG files are parsed often, and
Spark and loglake live in the loglake virtualenv, not in Airflow's.
"""

from __future__ import annotations

import json
import logging
import os
import shlex
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import DAG, BaseHook, DeadlineAlert, DeadlineReference, SyncCallback, Variable
from airflow.sdk.exceptions import AirflowFailException, AirflowNotFoundException

REPOSITORY = Path(__file__).resolve().parent.parent
PROPERTIES = REPOSITORY / "conf" / "airflow.properties"
VARIABLE = "loglake"
# Schedules start here; runs before the first deployment are not wanted (catchup=False).
START_DATE = datetime(2025, 1, 1, tzinfo=timezone.utc)

log = logging.getLogger(__name__)


def read_properties(path: Path) -> dict[str, str]:
    """`key=value` lines of a Kafka-style properties file; blank lines and `#`/`!` comments skipped."""
    values: dict[str, str] = {}
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        text = line.strip()
        if not text or text.startswith(("#", "!")):
            continue
        key, sep, value = text.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"{path}:{number}: expected key=value, got {line!r}")
        values[key.strip()] = value.strip()
    return values


@dataclass(frozen=True)
class Settings:
    """The settings one DAG sees: `<dag>.<key>` first, then `<key>`."""

    dag: str
    values: Mapping[str, str]

    def get(self, key: str) -> str:
        for name in (f"{self.dag}.{key}", key):
            if name in self.values:
                return self.values[name]
        raise KeyError(f"no setting {key!r} (nor {self.dag}.{key}) in {PROPERTIES} or the Variable {VARIABLE!r}")

    def minutes(self, key: str) -> timedelta | None:
        """A duration in minutes; -1 (Kafka's "unlimited") means none."""
        value = int(self.get(key))
        return None if value < 0 else timedelta(minutes=value)


def load_settings(dag: str) -> Settings:
    values = read_properties(PROPERTIES)
    overrides = Variable.get(VARIABLE, default={}, deserialize_json=True)
    if not isinstance(overrides, dict):
        raise ValueError(f"the Airflow Variable {VARIABLE!r} must be a JSON object of settings, not {overrides!r}")
    values.update({key: str(value) for key, value in overrides.items()})
    return Settings(dag, values)


@contextmanager
def connection_or_master(conn_id: str, master: str) -> Iterator[None]:
    """Make `conn_id` name `master` for as long as the block runs, unless a connection of that id exists.

    The provider's hook falls back to YARN for a missing connection; loglake's default is a local
    master. An `AIRFLOW_CONN_*` variable is Airflow's own way to define a connection, and it is set
    only while no other definition exists, so it never shadows one.
    """
    try:
        BaseHook.get_connection(conn_id)
        yield
        return
    except AirflowNotFoundException:
        pass
    name = f"AIRFLOW_CONN_{conn_id.upper()}"
    log.info("no connection %r: Spark master %s (spark.master of the settings)", conn_id, master)
    os.environ[name] = json.dumps({"conn_type": "spark", "host": master})
    try:
        yield
    finally:
        os.environ.pop(name, None)


class LoglakeSparkSubmitOperator(SparkSubmitOperator):
    """spark-submit of a loglake job with the loglake virtualenv's spark-submit and interpreter.

    `missing_settings` names settings the job needs that are empty: the task then fails at once,
    without retries, saying which to set.
    """

    def __init__(
        self, *, python: str, default_master: str, missing_settings: Sequence[str] = (), **kwargs: Any
    ) -> None:
        super().__init__(**kwargs)
        self.python = python
        self.default_master = default_master
        self.missing_settings = list(missing_settings)

    def execute(self, context: Any) -> None:
        if self.missing_settings:
            raise AirflowFailException(
                f"set {', '.join(self.missing_settings)} in the Airflow Variable {VARIABLE!r} "
                f"(a JSON object) or in {PROPERTIES}"
            )
        if not Path(self.application).is_file():
            raise AirflowFailException(f"{self.application} does not exist: is this checkout older than the DAG?")
        if not os.access(self.python, os.X_OK):
            raise AirflowFailException(
                f"{self.python} is not an executable: run `make setup` in {REPOSITORY}, or set loglake.python"
            )
        # spark-submit is looked up on PATH (the provider allows no path to it); the pip-installed one
        # finds SPARK_HOME with PYSPARK_DRIVER_PYTHON, and the driver and workers run that interpreter.
        self.env_vars = {
            "PATH": os.pathsep.join([str(Path(self.python).parent), os.environ.get("PATH", os.defpath)]),
            "PYSPARK_PYTHON": self.python,
            "PYSPARK_DRIVER_PYTHON": self.python,
            **(self.env_vars or {}),
        }
        with connection_or_master(self._conn_id, self.default_master):
            super().execute(context)


def log_missed_deadline(context: Mapping[str, Any], **kwargs: Any) -> None:
    """Deadline alert callback: a warning naming the late run. Synchronous, so the executor runs it,
    with the DAG bundle (this folder) on the path."""
    run = context.get("dag_run") or {}
    log.warning("loglake maintenance run %s of %s missed its deadline", run.get("run_id"), run.get("dag_id"))


def job_arguments(settings: Settings, required: Mapping[str, str], fixed: Sequence[str]) -> tuple[list[str], list[str]]:
    """The job's command line (`--flag <setting>` per required setting, then fixed, then `args`) and the
    required settings left empty."""
    arguments: list[str] = []
    missing: list[str] = []
    for flag, key in required.items():
        value = settings.get(key)
        if not value:
            missing.append(f"{settings.dag}.{key}" if f"{settings.dag}.{key}" in settings.values else key)
        arguments += [flag, value]
    return arguments + list(fixed) + shlex.split(settings.get("args")), missing


def maintenance_dag(name: str, job: str, *, required: Mapping[str, str], fixed: Sequence[str] = (), doc_md: str) -> DAG:
    """The DAG `loglake_<name>`: one SparkSubmitOperator running `jobs/<job>`.

    `required` maps the job's flags to the settings that give their values.
    """
    settings = load_settings(name)
    arguments, missing = job_arguments(settings, required, fixed)
    python = REPOSITORY / settings.get("loglake.python")
    deadline = settings.minutes("deadline.minutes")
    dag_id = f"loglake_{name}"
    with DAG(
        dag_id=dag_id,
        schedule=settings.get("schedule") or None,
        start_date=START_DATE,
        # Each run processes everything pending, so missed intervals need no runs of their own;
        # one run at a time, as a job's checkpoint admits one writer.
        catchup=False,
        max_active_runs=1,
        doc_md=doc_md,
        tags=["loglake"],
        default_args={
            "retries": int(settings.get("retries")),
            "retry_delay": timedelta(minutes=int(settings.get("retry.delay.minutes"))),
            "execution_timeout": settings.minutes("execution.timeout.minutes"),
        },
        deadline=None
        if deadline is None
        else DeadlineAlert(
            reference=DeadlineReference.DAGRUN_QUEUED_AT,
            interval=deadline,
            callback=SyncCallback(log_missed_deadline),
        ),
    ) as dag:
        LoglakeSparkSubmitOperator(
            task_id=name,
            application=str(REPOSITORY / "jobs" / job),
            application_args=arguments,
            conn_id=settings.get("spark.conn.id"),
            default_master=settings.get("spark.master"),
            python=str(python),
            missing_settings=missing,
            conf={"spark.pyspark.python": str(python), "spark.pyspark.driver.python": str(python)},
            name=dag_id,
            doc_md=doc_md,
        )
    return dag
