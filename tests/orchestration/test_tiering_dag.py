"""`dag.test()` of loglake_tiering against a live broker with a lake root: the run's
spark-submit of jobs/tier.py copies the rolled segments of a remote-storage topic into its
Delta table, each offset once, and the broker then deletes them locally."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from confluent_kafka import Producer
from deltalake import DeltaTable

from airflow_helpers import AirflowRunner
from clients.client_helpers import create_topic, make_broker, serve, unique_name
from ingest_gateway.process import BrokerProcess

pytestmark = pytest.mark.slow

DEADLINE_S = 60
TIERED = {"remote.storage.enable": "true", "local.retention.ms": "0", "retention.ms": "-1", "segment.bytes": "2000"}


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("lake")


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory, lake: Path) -> Iterator[BrokerProcess]:
    overrides = {
        "rsm.config.lake.root": str(lake),
        "log.retention.check.interval.ms": "100",
        "file.delete.delay.ms": "100",
    }
    yield from serve(make_broker(tmp_path_factory.mktemp("broker") / "logs", **overrides))


def produce(broker: BrokerProcess, topic: str, count: int) -> None:
    # Batches of at most 1000 bytes, so that the records span many 2000-byte segments.
    producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", "linger.ms": 5, "batch.size": 1000})
    errors: list = []
    for n in range(count):
        producer.produce(
            topic, b"value-%05d" % n, key=b"k%d" % n, partition=0, on_delivery=lambda e, _: e and errors.append(e)
        )
    assert producer.flush(30) == 0 and not errors, errors


def tiering_state(broker: BrokerProcess, topic: str) -> dict:
    return httpx.get(f"{broker.http_url}/topics/{topic}/partitions/0/tiering", timeout=10).json()


def test_a_run_tiers_rolled_segments_into_delta(airflow: AirflowRunner, broker: BrokerProcess, lake: Path) -> None:
    topic = unique_name("airflow-tier")
    create_topic(broker.bootstrap, topic, partitions=1, config=TIERED)
    produce(broker, topic, 400)

    run = airflow.run_dag(
        "loglake_tiering", {"bootstrap.servers": broker.bootstrap, "tiering.topics": topic, "retries": "0"}
    )
    assert run.state == "success", run.log[-8000:]

    table = DeltaTable(str(lake / topic))
    offsets = sorted(table.to_pyarrow_table(columns=["offset"])["offset"].to_pylist())
    tiered = tiering_state(broker, topic)["tiered_offset"]
    assert tiered > 0 and offsets == list(range(tiered))  # each tiered offset exactly once
    deadline = time.monotonic() + DEADLINE_S
    while tiering_state(broker, topic)["log_start_offset"] == 0:  # local retention deletes what is tiered
        assert time.monotonic() < deadline, tiering_state(broker, topic)
        time.sleep(0.05)
