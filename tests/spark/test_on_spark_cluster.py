"""The loglake source, sink and jobs on a real Spark standalone cluster (a master and two
one-core workers, harness/standalone_cluster.py), run with spark-submit: tasks run in
executor processes, which unpickle the source, import loglake and reach the brokers."""

from __future__ import annotations

import json
import subprocess
import sys

import pyarrow as pa
import pytest
from clients.client_helpers import create_topic, read_all, unique_name
from deltalake import DeltaTable
from loglake.spark.lake_writer import FAULT_EXECUTOR_MID_WRITE
from source_helpers import REPO, produce
from test_group_commits import committed

from harness.standalone_cluster import cluster_environment, connect_server

pytestmark = pytest.mark.slow

PARTITIONS = 3
RECORDS = 1500


def result_of(output: str) -> dict:
    (line,) = [line for line in output.splitlines() if line.startswith("RESULT ")]
    return json.loads(line.removeprefix("RESULT "))


def test_reads_the_exactly_once_writer_and_consume_group_run_on_the_executors(
    spark_cluster, broker, topic, tmp_path
) -> None:
    out_topic, cg_topic = unique_name("cluster-out"), unique_name("cluster-cg-out")
    create_topic(broker.bootstrap, topic, partitions=PARTITIONS)
    create_topic(broker.bootstrap, out_topic, partitions=2)
    create_topic(broker.bootstrap, cg_topic, partitions=2)
    records = [{"key": b"k%d" % i, "value": b"v" * (i % 40), "partition": i % PARTITIONS} for i in range(RECORDS)]
    produce(broker, topic, records)
    before = spark_cluster.executor_dirs()

    group = unique_name("cluster-etl")
    output = spark_cluster.submit(
        REPO / "tests/spark/cluster_app.py", broker.bootstrap, topic, out_topic, str(tmp_path), group, cg_topic
    )
    result = result_of(output.stdout)

    expected = {
        str(p): [RECORDS // PARTITIONS, sum(len(r["value"]) for r in records if r["partition"] == p)]
        for p in range(PARTITIONS)
    }
    assert result["batch"] == result["two_columns"] == result["streamed"] == result["read_topic"] == expected
    assert result["stream_batches"] == 2  # maxOffsetsPerTrigger 750: 250 per partition
    written = read_all(broker.bootstrap, out_topic, partitions=2)
    assert sorted((k, v) for _, _, k, v in written) == sorted((r["key"], r["value"]) for r in records)
    # consume_group: the group's run, one Delta commit of the executors' files.
    consumed = DeltaTable(str(tmp_path / "consumed"))
    stored = consumed.to_pyarrow_table().to_pylist()
    assert sorted((r["key"], r["size"]) for r in stored) == sorted((r["key"], len(r["value"])) for r in records)
    assert consumed.transaction_version(f"loglake-consume-group:{group}") == 1
    # consume_group into a topic: each executor's task produced its share in a transaction.
    copied = read_all(broker.bootstrap, cg_topic, partitions=2)
    assert sorted((k, v) for _, _, k, v in copied) == sorted((r["key"], r["value"]) for r in records)
    assert committed(broker, f"{group}-topic", topic, PARTITIONS) == dict.fromkeys(range(PARTITIONS), RECORDS // PARTITIONS)
    # One executor on each worker ran the application's tasks.
    started = [p for p in spark_cluster.executor_dirs() if p not in before]
    assert {p.parents[1].name for p in started} == {"worker-0", "worker-1"}


def test_an_executor_killed_mid_write_leaves_the_sink_exactly_once(spark_cluster, broker, topic, tmp_path) -> None:
    """jobs/delta_sink.py on the cluster: the executor running the first attempt of task 0
    is killed (SIGKILL of its JVM) with a Parquet file half written; Spark runs the task
    again on an executor the worker starts, and the table holds every offset once, without
    the killed attempt's file."""
    create_topic(broker.bootstrap, topic, partitions=PARTITIONS)
    produce(broker, topic, [{"value": b"r%d" % i, "partition": i % PARTITIONS} for i in range(RECORDS)])
    table = tmp_path / "table"
    before = spark_cluster.executor_dirs()

    spark_cluster.submit(
        REPO / "jobs/delta_sink.py",
        *("--bootstrap-servers", broker.bootstrap, "--topics", topic, "--table", str(table)),
        conf={"spark.executorEnv.LOGLAKE_FAULT": f"{FAULT_EXECUTOR_MID_WRITE}:0"},
    )

    started = [p for p in spark_cluster.executor_dirs() if p not in before]
    assert len(started) >= 3, started  # the two, and the one started for the killed one
    snapshot = DeltaTable(str(table))
    rows = snapshot.to_pyarrow_table(columns=["partition", "offset"]).to_pylist()
    assert sorted((r["partition"], r["offset"]) for r in rows) == sorted(
        (p, o) for p in range(PARTITIONS) for o in range(RECORDS // PARTITIONS)
    )
    referenced = set(pa.table(snapshot.get_add_actions(flatten=True))["path"].to_pylist())
    on_disk = {str(p.relative_to(table)) for p in table.glob("**/*.parquet")}
    assert referenced < on_disk  # the killed attempt's file is there, and not in the table


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
