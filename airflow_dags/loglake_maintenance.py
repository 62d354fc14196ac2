"""What the loglake DAGs share: their settings, the Spark submit of a job of `jobs/`, and the DAG around it.

Settings are the keys of `conf/airflow.properties`, overridden by the Airflow Variable `loglake`
(a JSON object of the same keys: one Variable read per DAG file parse, as Airflow's best practices
advise). A key prefixed with the DAG's short name (`delta_sink.retries`) wins over the plain key.

Security: settings named as Spark's Kafka source options (`kafka.security.protocol`,
`kafka.sasl.mechanism`, `kafka.ssl.truststore.location`, ...) reach the job as
`--option kafka.<name>=<value>`. Secrets never go through settings (a Variable is not secret) nor
the command line (any user of the host can read it): the SASL user is the login and password of
the Airflow connection `security.conn.id`, and a key password its extra `ssl.key.password`; the
task writes them as `kafka.sasl.jaas.config` / `kafka.ssl.key.password` into a private file for
the job's `--options-file`, removed when spark-submit ends.

This module imports Airflow and reads `conf/`, nothing heavier: DAG files are parsed often, and
Spark and loglake live in the loglake virtualenv, not in Airflow's.
"""

from __future__ import annotations

import json
import logging
import os
import shlex
import subprocess
import tempfile
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
# Settings passed to the jobs as their security options (`--option kafka.<name>=<value>`).
OPTION_PREFIX = "kafka."
# Options that are secrets: from the Airflow connection `security.conn.id` only.
SECRET_OPTIONS = ("kafka.sasl.jaas.config", "kafka.ssl.key.password")
LOGIN_MODULES = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}

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

    def prefixed(self, prefix: str) -> dict[str, str]:
        """The settings whose names start with `prefix`, `<dag>.<name>` winning over `<name>`."""
        own = f"{self.dag}.{prefix}"
        values = {k: v for k, v in self.values.items() if k.startswith(prefix)}
        return values | {k.removeprefix(f"{self.dag}."): v for k, v in self.values.items() if k.startswith(own)}

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
    without retries, saying which to set. `security_conn_id` is the Airflow connection of the
    job's secrets (module docstring); `security_protocol` and `sasl_mechanism` the settings'.
    """

    def __init__(
        self,
        *,
        python: str,
        default_master: str,
        missing_settings: Sequence[str] = (),
        security_conn_id: str = "",
        security_protocol: str = "",
        sasl_mechanism: str = "",
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.python = python
        self.default_master = default_master
        self.missing_settings = list(missing_settings)
        self.security_conn_id = security_conn_id
        self.security_protocol = security_protocol.strip().upper()
        self.sasl_mechanism = sasl_mechanism.strip().upper()

    def secret_options(self) -> dict[str, str]:
        """kafka.sasl.jaas.config from the connection's login and password (the login module
        of `sasl_mechanism`), kafka.ssl.key.password from its extra; none without a connection."""
        try:
            connection = BaseHook.get_connection(self.security_conn_id)
        except AirflowNotFoundException:
            if self.security_protocol.startswith("SASL_"):
                raise AirflowFailException(
                    f"kafka.security.protocol={self.security_protocol} needs the SASL user: create the Airflow "
                    f"connection {self.security_conn_id!r} with its login and password"
                ) from None
            return {}
        options = {}
        if connection.login:
            if self.sasl_mechanism not in LOGIN_MODULES:
                raise AirflowFailException(f"kafka.sasl.mechanism must be one of {', '.join(LOGIN_MODULES)}")

            def quoted(value: str) -> str:
                return '"' + value.replace('"', '\\"') + '"'

            options[SECRET_OPTIONS[0]] = (
                f"{LOGIN_MODULES[self.sasl_mechanism]} required username={quoted(connection.login)} "
                f"password={quoted(connection.password or '')};"
            )
        key_password = connection.extra_dejson.get("ssl.key.password")
        if key_password:
            options[SECRET_OPTIONS[1]] = key_password
        return options

    def class_archive_conf(self) -> dict[str, str]:
        """The driver's JVM options for the Spark class archive set-up built beside the loglake
        interpreter (docs/spark.md), asked of that interpreter; none if it has no archive."""
        found = subprocess.run(
            [self.python, "-m", "loglake.spark.class_archive", "--java-options"],
            env=os.environ | {"PYTHONPATH": str(REPOSITORY / "platform")},
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        options = found.stdout.strip()
        if found.returncode != 0 or not options:
            return {}
        return {"spark.driver.defaultJavaOptions": options, "spark.executor.defaultJavaOptions": options}

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
        # They import the loglake of this checkout, whose jobs/ they run, whatever the
        # virtualenv's own install of it points at.
        self.env_vars = {
            "PATH": os.pathsep.join([str(Path(self.python).parent), os.environ.get("PATH", os.defpath)]),
            "PYSPARK_PYTHON": self.python,
            "PYSPARK_DRIVER_PYTHON": self.python,
            "PYTHONPATH": os.pathsep.join(filter(None, [str(REPOSITORY / "platform"), os.environ.get("PYTHONPATH")])),
            **(self.env_vars or {}),
        }
        self.conf = {**self.class_archive_conf(), **(self.conf or {})}
        secrets = self.secret_options()
        options_file = None
        if secrets:
            # Private to this user (mkstemp makes it 0600); the driver runs here (client deploy mode).
            fd, options_file = tempfile.mkstemp(prefix="loglake-job-", suffix=".properties")
            with os.fdopen(fd, "w") as f:
                f.writelines(f"{name}={value}\n" for name, value in secrets.items())
            self.application_args = [*(self.application_args or []), "--options-file", options_file]
        try:
            with connection_or_master(self._conn_id, self.default_master):
                super().execute(context)
        finally:
            if options_file is not None:
                os.unlink(options_file)


def log_missed_deadline(context: Mapping[str, Any], **kwargs: Any) -> None:
    """Deadline alert callback: a warning naming the late run. Synchronous, so the executor runs it,
    with the DAG bundle (this folder) on the path."""
    run = context.get("dag_run") or {}
    log.warning("loglake maintenance run %s of %s missed its deadline", run.get("run_id"), run.get("dag_id"))


def job_arguments(settings: Settings, required: Mapping[str, str], fixed: Sequence[str]) -> tuple[list[str], list[str]]:
    """The job's command line (`--flag <setting>` per required setting, `--option kafka.<name>=<value>`
    per security setting, then fixed, then `args`) and the required settings left empty."""
    arguments: list[str] = []
    missing: list[str] = []
    for flag, key in required.items():
        value = settings.get(key)
        if not value:
            missing.append(f"{settings.dag}.{key}" if f"{settings.dag}.{key}" in settings.values else key)
        arguments += [flag, value]
    options = settings.prefixed(OPTION_PREFIX)
    secrets = [name for name in SECRET_OPTIONS if options.get(name)]
    if secrets:
        raise ValueError(
            f"{', '.join(secrets)}: secrets are not settings; give the SASL user as the login and password "
            f"(and a key password as the extra ssl.key.password) of the Airflow connection "
            f"{settings.get('security.conn.id')!r}"
        )
    for name, value in sorted(options.items()):
        if value:
            arguments += ["--option", f"{name}={value}"]
    return arguments + list(fixed) + shlex.split(settings.get("args")), missing


def maintenance_dag(name: str, job: str, *, required: Mapping[str, str], fixed: Sequence[str] = (), doc_md: str) -> DAG:
    """The DAG `loglake_<name>`: one SparkSubmitOperator running `jobs/<job>`.

    `required` maps the job's flags to the settings that give their values.
    """
    settings = load_settings(name)
    arguments, missing = job_arguments(settings, required, fixed)
    security = settings.prefixed(OPTION_PREFIX)
    python = REPOSITORY / settings.get("loglake.python")
    deadline = settings.minutes("deadline.minutes")
    dag_id = f"loglake_{name}"
    with DAG(
        dag_id=dag_id,
        schedule=settings.get("schedule") or None,
        start_date=START_DATE,
        # Each run processes everything pending, so missed intervals need no runs of their own;
        # one run at a time: a second would only do the same work again.
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
            security_conn_id=settings.get("security.conn.id"),
            security_protocol=security.get("kafka.security.protocol", ""),
            sasl_mechanism=security.get("kafka.sasl.mechanism", ""),
            conf={"spark.pyspark.python": str(python), "spark.pyspark.driver.python": str(python)},
            name=dag_id,
            doc_md=doc_md,
        )
    return dag
