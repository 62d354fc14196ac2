"""`dag.test()` of loglake_delta_sink against a broker the job may reach over SASL_SSL only: the
security settings of the Variable reach the job as `--option kafka.<name>=<value>`, the SASL user
comes from the Airflow connection `loglake_kafka` through a private options file (never the
command line nor the log), and the table holds every record. Without that connection, a SASL
run fails at once, naming it."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from deltalake import DeltaTable

from airflow_helpers import AirflowRunner
from bench.pki import make_pki
from clients.client_helpers import add_users, create_topic, produce_values, sasl_ssl_broker, serve, unique_name
from harness.process import BrokerProcess

pytestmark = pytest.mark.slow

PASSWORD = "dag-job-secret"


@dataclass(frozen=True)
class Secure:
    broker: BrokerProcess  # its PLAINTEXT listener is the test's own
    sasl_ssl: str
    ca: Path


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secure]:
    pki = make_pki(tmp_path_factory.mktemp("pki"))
    process, address = sasl_ssl_broker(tmp_path_factory.mktemp("secure-dag") / "logs", pki)
    for broker in serve(process):
        add_users(broker, {"dag-job": PASSWORD})
        yield Secure(broker, address, pki.ca)


def variables(secure: Secure, topic: str, lake: Path) -> dict[str, str]:
    return {
        "bootstrap.servers": secure.sasl_ssl,
        "kafka.security.protocol": "SASL_SSL",
        "kafka.sasl.mechanism": "SCRAM-SHA-512",
        "delta_sink.kafka.ssl.truststore.location": str(secure.ca),
        "delta_sink.topics": topic,
        "delta_sink.table": str(lake / "table"),
        "delta_sink.checkpoint": str(lake / "checkpoint"),
        "retries": "0",
    }


def test_the_job_runs_over_sasl_ssl_with_the_connections_user(
    airflow: AirflowRunner, secure: Secure, tmp_path: Path
) -> None:
    topic = unique_name("airflow-secure")
    create_topic(secure.broker.bootstrap, topic)
    values = [b"v%d" % i for i in range(50)]
    produce_values(secure.broker.bootstrap, topic, values)
    connection = {"conn_type": "generic", "login": "dag-job", "password": PASSWORD}

    run = airflow.run_dag("loglake_delta_sink", variables(secure, topic, tmp_path), {"loglake_kafka": connection})

    assert run.state == "success", run.log[-8000:]
    table = DeltaTable(str(tmp_path / "table")).to_pyarrow_table(columns=["value"])
    assert sorted(table["value"].to_pylist()) == sorted(values)
    assert "--option kafka.security.protocol=SASL_SSL" in run.log
    assert f"--option kafka.ssl.truststore.location={secure.ca}" in run.log
    assert PASSWORD not in run.log
    (options_file,) = set(re.findall(r"--options-file (\S+)", run.log))
    assert not Path(options_file).exists()  # removed when spark-submit ended


def test_sasl_without_the_connection_fails_at_once(airflow: AirflowRunner, secure: Secure, tmp_path: Path) -> None:
    run = airflow.run_dag("loglake_delta_sink", variables(secure, unique_name("no-user"), tmp_path))

    assert (run.state, run.tasks) == ("failed", {"delta_sink": "failed"})
    assert "create the Airflow connection 'loglake_kafka' with its login and password" in run.log
    assert "spark-submit" not in run.log.lower()
