"""airflow_dags/ as Airflow parses it: the three DAGs, their defaults from conf/airflow.properties,
and the Variable `loglake` overriding them."""

from __future__ import annotations

from airflow_helpers import REPO, AirflowRunner

DAG_JOBS = {"loglake_delta_sink": "delta_sink.py", "loglake_compaction": "compact.py", "loglake_tiering": "tier.py"}


def test_dag_bag_loads_every_dag_with_the_defaults(airflow: AirflowRunner) -> None:
    parsed = airflow.parse()

    assert parsed["import_errors"] == {}
    assert set(parsed["dags"]) == set(DAG_JOBS)
    assert parsed["heavy_modules"] == []  # parsing imported no Spark, loglake or job code
    for dag_id, job in DAG_JOBS.items():
        dag = parsed["dags"][dag_id]
        (task,) = dag["tasks"].values()
        assert task["application"] == str(REPO / "jobs" / job)
        assert task["conn_id"] == "loglake_spark"
        assert (task["retries"], task["execution_timeout_s"]) == (3, 3600)
        assert dag["deadlines"] == [[7200, "loglake_maintenance.log_missed_deadline"]]
        assert (dag["catchup"], dag["max_active_runs"]) == (False, 1)
        assert dag["doc_md"] and task["doc_md"]
    sink = parsed["dags"]["loglake_delta_sink"]
    assert sink["schedule"] == "@hourly"
    assert sink["tasks"]["delta_sink"]["application_args"][-2:] == ["--trigger", "available-now"]


def test_the_loglake_variable_overrides_the_properties(airflow: AirflowRunner) -> None:
    parsed = airflow.parse(
        {
            "bootstrap.servers": "kafka-1:9092,kafka-2:9092",
            "compaction.topics": "users,accounts",
            "compaction.retries": "1",
            "compaction.args": "--dry-run 'a b'",
            "tiering.schedule": "0 3 * * *",
            "deadline.minutes": "-1",
        }
    )

    compaction = parsed["dags"]["loglake_compaction"]
    assert compaction["tasks"]["compaction"]["application_args"] == [
        "--bootstrap-servers",
        "kafka-1:9092,kafka-2:9092",
        "--topics",
        "users,accounts",
        "--dry-run",
        "a b",
    ]
    assert compaction["tasks"]["compaction"]["retries"] == 1
    assert parsed["dags"]["loglake_tiering"]["tasks"]["tiering"]["retries"] == 3
    assert parsed["dags"]["loglake_tiering"]["schedule"] == "0 3 * * *"
    assert all(dag["deadlines"] == [] for dag in parsed["dags"].values())


def test_a_run_without_its_topics_fails_at_once_naming_the_setting(airflow: AirflowRunner) -> None:
    result = airflow.run_dag("loglake_compaction", {"retries": "2"})

    assert (result.state, result.tasks) == ("failed", {"compaction": "failed"})
    assert "set compaction.topics in the Airflow Variable 'loglake'" in result.log
    assert "spark-submit" not in result.log.lower()


def test_a_run_without_the_loglake_virtualenv_fails_at_once(airflow: AirflowRunner, tmp_path) -> None:
    variables = {"delta_sink.topics": "t", "loglake.python": str(tmp_path / "no-venv" / "python")}

    result = airflow.run_dag("loglake_delta_sink", variables)

    assert (result.state, result.tasks) == ("failed", {"delta_sink": "failed"})
    assert f"{tmp_path / 'no-venv' / 'python'} is not an executable: run `make setup`" in result.log


def test_security_settings_reach_the_jobs_as_options(airflow: AirflowRunner) -> None:
    parsed = airflow.parse(
        {
            "kafka.security.protocol": "SASL_SSL",
            "kafka.sasl.mechanism": "SCRAM-SHA-512",
            "tiering.kafka.ssl.truststore.location": "/etc/loglake/ca.pem",
            "tiering.args": "--lake-root /lake",
        }
    )

    assert parsed["import_errors"] == {}
    tiering = parsed["dags"]["loglake_tiering"]["tasks"]["tiering"]["application_args"]
    assert tiering[4:] == [
        "--option", "kafka.sasl.mechanism=SCRAM-SHA-512",
        "--option", "kafka.security.protocol=SASL_SSL",
        "--option", "kafka.ssl.truststore.location=/etc/loglake/ca.pem",
        "--lake-root", "/lake",
    ]  # fmt: skip
    compaction = parsed["dags"]["loglake_compaction"]["tasks"]["compaction"]["application_args"]
    assert "kafka.security.protocol=SASL_SSL" in compaction and not any("truststore" in a for a in compaction)


def test_secrets_are_refused_as_settings(airflow: AirflowRunner) -> None:
    parsed = airflow.parse({"kafka.sasl.jaas.config": 'x required username="u" password="p";'})

    assert len(parsed["import_errors"]) == len(DAG_JOBS)  # each DAG file refuses
    error = next(iter(parsed["import_errors"].values()))
    assert "kafka.sasl.jaas.config: secrets are not settings" in error and "'loglake_kafka'" in error
    assert 'password="p"' not in error
