"""kafka.group.id: queries start from the group's committed offsets and commit their ends,
visible through OffsetFetch and `loglake groups describe`."""

from __future__ import annotations

import subprocess
import sys

from clients.client_helpers import create_topic, raw_request, unique_name
from loglake.protocol import ApiKey
from source_helpers import offsets_of, produce, run_available_now, to_parquet, with_options


def committed(broker, group: str, topic: str, partitions: int) -> dict[int, int]:
    """The group's committed offsets over the Kafka protocol (OffsetFetch v7)."""
    body = {"group_id": group, "topics": [{"name": topic, "partition_indexes": list(range(partitions))}]}
    response = raw_request(broker.bootstrap, ApiKey.OFFSET_FETCH, 7, body)
    assert response["error_code"] == 0, response
    return {p["partition_index"]: p["committed_offset"] for t in response["topics"] for p in t["partitions"]}


def commit_with_confluent(broker, group: str, topic: str, offsets: dict[int, int]) -> None:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        consumer.commit(offsets=[TopicPartition(topic, p, o) for p, o in offsets.items()], asynchronous=False)
    finally:
        consumer.close()


def read_to_parquet(spark, broker, topic: str, group: str, out, checkpoint) -> None:
    options = {"subscribe": topic, "startingOffsets": "earliest", "kafka.group.id": group}
    run_available_now(to_parquet(with_options(spark.readStream, broker, options).load(), out, checkpoint))


def test_streaming_starts_from_the_group_and_commits_each_batch(loglake_spark, broker, topic, tmp_path) -> None:
    group = unique_name("spark-group")
    create_topic(broker.bootstrap, topic, partitions=2)
    produce(broker, topic, [{"value": b"%d" % i, "partition": i % 2} for i in range(20)])
    commit_with_confluent(broker, group, topic, {0: 5})  # partition 1: nothing committed

    read_to_parquet(loglake_spark, broker, topic, group, tmp_path / "out", tmp_path / "checkpoint-1")
    assert offsets_of(loglake_spark.read.parquet(str(tmp_path / "out"))) == [(0, o) for o in range(5, 10)] + [
        (1, o) for o in range(10)
    ]
    assert committed(broker, group, topic, 2) == {0: 10, 1: 10}

    # A new query (fresh checkpoint) of the same group goes on where the group is.
    produce(broker, topic, [{"value": b"%d" % i, "partition": 1} for i in range(3)])
    read_to_parquet(loglake_spark, broker, topic, group, tmp_path / "out-2", tmp_path / "checkpoint-2")
    assert offsets_of(loglake_spark.read.parquet(str(tmp_path / "out-2"))) == [(1, 10), (1, 11), (1, 12)]
    assert committed(broker, group, topic, 2) == {0: 10, 1: 13}

    described = subprocess.run(
        [
            sys.executable,
            "-m",
            "loglake.cli",
            "groups",
            "describe",
            "--bootstrap-http",
            broker.http_url,
            "--group",
            group,
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    lines = [line.split() for line in described.splitlines() if topic in line]
    assert len(lines) == 2, described
    # partition, current offset, log end offset, lag
    assert sorted(fields[2:6] for fields in lines) == [["0", "10", "10", "0"], ["1", "13", "13", "0"]], described


def test_batch_read_with_commit_offsets(loglake_spark, broker, topic) -> None:
    group = unique_name("spark-batch-group")
    create_topic(broker.bootstrap, topic, partitions=2)
    produce(broker, topic, [{"value": b"%d" % i, "partition": i % 2} for i in range(10)])
    options = {"subscribe": topic, "kafka.group.id": group, "commitOffsets": "true", "minPartitions": "8"}

    first = with_options(loglake_spark.read, broker, options).load()
    assert first.rdd.getNumPartitions() == 2  # one task per partition, which commits its end
    assert offsets_of(first) == [(p, o) for p in range(2) for o in range(5)]
    assert committed(broker, group, topic, 2) == {0: 5, 1: 5}

    produce(broker, topic, [{"value": b"new", "partition": 0}])
    assert offsets_of(with_options(loglake_spark.read, broker, options).load()) == [(0, 5)]
    assert committed(broker, group, topic, 2) == {0: 6, 1: 5}
