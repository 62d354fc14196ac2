"""`dag.test()` of loglake_delta_sink against a live broker: the scheduled catch-up runs spark-submit
of jobs/delta_sink.py (from an Airflow that knows nothing of loglake's virtualenv) and the Delta
table then holds every produced record exactly once; a job that fails fails the run."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer
from deltalake import DeltaTable

from airflow_helpers import AirflowRunner
from clients.client_helpers import create_topic, make_broker, serve, unique_name
from harness.process import BrokerProcess

pytestmark = pytest.mark.slow

PARTITIONS = 2


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    yield from serve(make_broker(tmp_path_factory.mktemp("broker") / "logs"))


def produce(bootstrap: str, topic: str, first: int, count: int) -> dict[tuple[int, int], tuple[bytes, bytes]]:
    """Keyed records n = first .. first+count-1; what the broker acknowledged, by (partition, offset)."""
    acked: dict[tuple[int, int], tuple[bytes, bytes]] = {}

    def report(err, msg) -> None:
        assert err is None, err
        acked[(msg.partition(), msg.offset())] = (msg.key(), msg.value())

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    for n in range(first, first + count):
        producer.produce(topic, key=b"k%d" % n, value=b"v%d" % n, partition=n % PARTITIONS, on_delivery=report)
    assert producer.flush(30) == 0
    assert len(acked) == count
    return acked


def table_rows(path: Path) -> list[tuple[int, int, bytes, bytes]]:
    table = DeltaTable(str(path)).to_pyarrow_table(columns=["partition", "offset", "key", "value"]).to_pydict()
    return sorted(zip(table["partition"], table["offset"], table["key"], table["value"]))


def expected_rows(acked: dict[tuple[int, int], tuple[bytes, bytes]]) -> list[tuple[int, int, bytes, bytes]]:
    return sorted((p, o, k, v) for (p, o), (k, v) in acked.items())


def sink_variables(broker: BrokerProcess, topic: str, lake: Path) -> dict[str, str]:
    return {
        "bootstrap.servers": broker.bootstrap,
        "delta_sink.topics": topic,
        "delta_sink.table": str(lake / "table"),
        "retries": "0",  # a failure is the test's answer, not a reason to try again
    }


def test_each_run_catches_up_exactly_once(airflow: AirflowRunner, broker: BrokerProcess, tmp_path: Path) -> None:
    topic = unique_name("airflow-sink")
    create_topic(broker.bootstrap, topic, partitions=PARTITIONS)
    variables = sink_variables(broker, topic, tmp_path)
    acked = produce(broker.bootstrap, topic, 0, 300)

    first = airflow.run_dag("loglake_delta_sink", variables)
    assert first.state == "success", first.log[-8000:]
    # No connection `loglake_spark` is defined: the master of conf/airflow.properties, not YARN.
    assert "--master local[*]" in first.log
    # The driver starts from the Spark class archive set-up built (docs/spark.md).
    assert "spark.driver.defaultJavaOptions=-XX:SharedArchiveFile=" in first.log
    assert table_rows(tmp_path / "table") == expected_rows(acked)

    # The next scheduled run takes what came since, from the table's app transactions, and nothing twice.
    acked |= produce(broker.bootstrap, topic, 300, 200)
    second = airflow.run_dag("loglake_delta_sink", variables)
    assert second.state == "success", second.log[-8000:]
    assert table_rows(tmp_path / "table") == expected_rows(acked)


def test_a_failing_job_fails_the_run(airflow: AirflowRunner, broker: BrokerProcess, tmp_path: Path) -> None:
    variables = sink_variables(broker, unique_name("airflow-sink-fails"), tmp_path)

    result = airflow.run_dag(
        "loglake_delta_sink",
        {**variables, "delta_sink.args": "--no-such-option"},
        connections={"loglake_spark": {"conn_type": "spark", "host": "local[1]"}},
    )

    assert (result.state, result.tasks) == ("failed", {"delta_sink": "failed"})
    assert "--master local[1]" in result.log  # the connection, where one exists, names the master
    # The job itself refused the option: spark-submit ran it, and its exit status failed the task.
    assert "unrecognized arguments: --no-such-option" in result.log
    assert not (tmp_path / "table").exists()
