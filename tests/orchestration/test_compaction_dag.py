"""`dag.test()` of loglake_compaction against a live broker and the session's Spark standalone
cluster: the run's SparkSubmitOperator submits jobs/compact.py to the cluster's master, its
executors plan a topic left to the Spark executor and hand the plan to the broker, which
rewrites its segments, and the topic shrinks to the latest value of each key at its offset."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from airflow_helpers import AirflowRunner
from clients.client_helpers import create_topic, make_broker, produce_keyed, read_all, serve, unique_name
from confluent_kafka import Producer

from harness.process import BrokerProcess
from harness.standalone_cluster import StandaloneCluster

pytestmark = pytest.mark.slow

SPARK_COMPACTED = {"cleanup.policy": "compact", "loglake.compaction.executor": "spark", "segment.bytes": "8192"}


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    yield from serve(make_broker(tmp_path_factory.mktemp("broker") / "logs"))


def partition_size(broker: BrokerProcess, topic: str) -> int:
    return sum(p.stat().st_size for p in (Path(broker.log_dir) / f"{topic}-0").glob("*.log"))


def test_a_run_on_the_spark_cluster_compacts_a_topic_left_to_spark(
    airflow: AirflowRunner, broker: BrokerProcess, spark_cluster: StandaloneCluster
) -> None:
    topic = unique_name("airflow-compact")
    create_topic(broker.bootstrap, topic, partitions=1, config=SPARK_COMPACTED)
    rows = [(b"key-%03d" % k, b"value-%d-%03d" % (r, k) * 4) for r in range(6) for k in range(80)]
    # A plain producer (no producer state to keep) in 4 KB batches: many segments to rewrite.
    producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", "linger.ms": 5, "batch.size": 4000})
    produced = produce_keyed(broker.bootstrap, topic, rows, producer)
    end = produce_keyed(broker.bootstrap, topic, [(b"filler", bytes(200)) for _ in range(60)], producer)[0][0]
    size_before = partition_size(broker, topic)

    variables = {
        "bootstrap.servers": broker.bootstrap,
        "compaction.topics": topic,
        "retries": "0",
        "spark.master": spark_cluster.master_url,
    }
    before = spark_cluster.executor_dirs()
    run = airflow.run_dag("loglake_compaction", variables)
    assert run.state == "success", run.log[-8000:]
    # The run's application got an executor on each worker.
    started = [p for p in spark_cluster.executor_dirs() if p not in before]
    assert sorted(p.parents[1].name for p in started) == ["worker-0", "worker-1"]

    assert partition_size(broker, topic) < size_before / 2
    latest = {key: (offset, value) for offset, key, value in produced}
    cleaned = [(o, k, v) for _, o, k, v in read_all(broker.bootstrap, topic) if o < end]
    assert cleaned == sorted((offset, key, value) for key, (offset, value) in latest.items())
    state = httpx.get(f"{broker.http_url}/topics/{topic}", timeout=10).json()["partitions"][0]["compaction"]
    assert state["last_cleaning"]["executor"] == "spark"
