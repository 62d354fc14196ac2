"""The loglake source, sink and jobs on a real Spark standalone cluster (a master and two
one-core workers, tests/spark/standalone_cluster.py), run with spark-submit: tasks run in
executor processes, which unpickle the source, import loglake and reach the brokers."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from clients.client_helpers import create_topic, produce_keyed, read_all, unique_name
from deltalake import DeltaTable
from source_helpers import REPO, produce
from standalone_cluster import cluster_environment, connect_server

pytestmark = pytest.mark.slow

PARTITIONS = 3
RECORDS = 1500


def result_of(output: str) -> dict:
    (line,) = [line for line in output.splitlines() if line.startswith("RESULT ")]
    return json.loads(line.removeprefix("RESULT "))


def executor_dirs(cluster) -> list[Path]:
    """The executors each worker ran (work dir / app id / executor id)."""
    return sorted(p for n in range(cluster.workers) for p in (cluster.base_dir / f"worker-{n}").glob("app-*/*"))


def test_reads_and_the_exactly_once_writer_run_on_the_executors(spark_cluster, broker, topic, tmp_path) -> None:
    out_topic = unique_name("cluster-out")
    create_topic(broker.bootstrap, topic, partitions=PARTITIONS)
    create_topic(broker.bootstrap, out_topic, partitions=2)
    records = [{"key": b"k%d" % i, "value": b"v" * (i % 40), "partition": i % PARTITIONS} for i in range(RECORDS)]
    produce(broker, topic, records)
    before = executor_dirs(spark_cluster)

    output = spark_cluster.submit(REPO / "tests/spark/cluster_app.py", broker.bootstrap, topic, out_topic, str(tmp_path))
    result = result_of(output.stdout)

    expected = {
        str(p): [RECORDS // PARTITIONS, sum(len(r["value"]) for r in records if r["partition"] == p)]
        for p in range(PARTITIONS)
    }
    assert result["batch"] == result["two_columns"] == result["streamed"] == result["read_topic"] == expected
    assert result["stream_batches"] == 2  # maxOffsetsPerTrigger 750: 250 per partition
    written = read_all(broker.bootstrap, out_topic, partitions=2)
    assert sorted((k, v) for _, _, k, v in written) == sorted((r["key"], r["value"]) for r in records)
    # One executor on each worker ran the application's tasks.
    started = [p for p in executor_dirs(spark_cluster) if p not in before]
    assert {p.parents[1].name for p in started} == {"worker-0", "worker-1"}


def test_consume_group_into_delta_on_the_cluster(spark_cluster, broker, topic, tmp_path) -> None:
    group = unique_name("cluster-etl")
    create_topic(broker.bootstrap, topic, partitions=PARTITIONS)
    produce(broker, topic, [{"key": b"k%d" % i, "value": b"x" * i, "partition": i % PARTITIONS} for i in range(90)])
    table = tmp_path / "table"
    argv = ["--bootstrap-servers", broker.bootstrap, "--group", group, "--topics", topic]
    spark_cluster.submit(
        REPO / "jobs/consume_group.py", *argv, "--select", "key, length(value) AS size", "--delta", str(table)
    )
    stored = DeltaTable(str(table)).to_pyarrow_table().to_pylist()
    assert sorted((r["key"], r["size"]) for r in stored) == sorted((b"k%d" % i, i) for i in range(90))
    assert DeltaTable(str(table)).transaction_version(f"loglake-consume-group:{group}") == 1


def test_compaction_spark_executor_on_the_cluster(spark_cluster, broker) -> None:
    topic = unique_name("cluster-compacted")
    create_topic(
        broker.bootstrap,
        topic,
        partitions=1,
        config={"cleanup.policy": "compact", "loglake.compaction.executor": "spark", "segment.bytes": "8192"},
    )
    rows = [(b"key-%03d" % k, b"value-%d-%03d" % (r, k) * 4) for r in range(5) for k in range(60)]
    produced = produce_keyed(broker.bootstrap, topic, rows)
    end = produce_keyed(broker.bootstrap, topic, [(b"filler", bytes(200)) for _ in range(60)])[0][0]
    latest = {key: (offset, value) for offset, key, value in produced}

    output = spark_cluster.submit(
        REPO / "jobs/compact.py", "--bootstrap-servers", broker.bootstrap, "--topics", topic, "--admin-url", broker.http_url
    )
    assert "cleaned up to" in output.stdout, output.stdout
    records = [(o, k, v) for _, o, k, v in read_all(broker.bootstrap, topic) if o < end]
    assert records == sorted((o, k, v) for k, (o, v) in latest.items())


def test_a_spark_connect_session_reads_a_topic(spark_cluster, broker, topic, tmp_path) -> None:
    create_topic(broker.bootstrap, topic, partitions=PARTITIONS)
    records = [{"value": b"c" * (i % 30), "partition": i % PARTITIONS} for i in range(300)]
    produce(broker, topic, records)
    with connect_server(spark_cluster, tmp_path / "connect-server.log") as url:
        client = subprocess.run(
            [sys.executable, str(REPO / "tests/spark/connect_client.py"), url, broker.bootstrap, topic],
            env=cluster_environment(),
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
    assert client.returncode == 0, client.stderr[-6000:]
    assert result_of(client.stdout) == {
        str(p): [100, sum(len(r["value"]) for r in records if r["partition"] == p)] for p in range(PARTITIONS)
    }
