"""The Spark source's reader follows a partition leader that moves between planning and reading
(3 brokers, RF=3). Planning and task reading are plain Python: no SparkSession needed."""

from __future__ import annotations

from cluster_helpers import create_topic, partition_of
from confluent_kafka import Producer
from loglake.spark.offset_ranges import plan_batch
from loglake.spark.options import parse_read_options
from loglake.spark.range_reader import read_range

from harness.local_cluster import LocalCluster


def test_a_planned_range_is_read_from_the_new_leader(cluster: LocalCluster) -> None:
    create_topic(cluster, "moving", 1, 3, {"min.insync.replicas": "2"})
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "enable.idempotence": True})
    for i in range(200):
        producer.produce("moving", b"%d" % i)
    assert producer.flush(30) == 0
    options = parse_read_options(
        {
            "kafka.bootstrap.servers": cluster.bootstrap,
            "subscribe": "moving",
            "kafka.max.partition.fetch.bytes": "1024",
        },
        streaming=False,
    )
    (planned,) = plan_batch(options)
    assert (planned.start, planned.end) == (0, 200)

    old_leader = partition_of(cluster.status(), "moving")["leader"]
    cluster.kill(old_leader)
    cluster.wait_for(lambda s: partition_of(s, "moving")["leader"] not in (-1, old_leader), exclude=(old_leader,))
    values = [v for decoded in read_range(options, planned) for v in decoded.batch.column("value").to_pylist()]
    assert values == [b"%d" % i for i in range(200)]
