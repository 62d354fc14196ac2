"""The Spark executor of compaction (jobs/compact.py) on a 3-broker cluster: one Spark
aggregation plans each partition, every replica rewrites its own segments with the plan,
and the three replicas end byte-identical below the cleaned offset, holding the latest
value of each key at the offset it was produced at."""

from __future__ import annotations

from pathlib import Path

import pytest
from clients.client_helpers import Record, produce_keyed, read_all
from cluster_helpers import create_topic
from confluent_kafka import Producer

from harness.local_cluster import LocalCluster
from jobs.compact import parse_args, run
from loglake.record.header import RecordBatchHeader

pytestmark = [pytest.mark.cluster, pytest.mark.spark, pytest.mark.slow]

SPARK_COMPACTED = {
    "cleanup.policy": "compact",
    "loglake.compaction.executor": "spark",
    "segment.bytes": "8192",
    "min.insync.replicas": "3",
}


def log_bytes_below(log_dir: Path, offset: int) -> bytes:
    """The partition's batches, all segments in order, up to the first at or past `offset`."""
    out = bytearray()
    for path in sorted(log_dir.glob("*.log")):
        data = path.read_bytes()
        pos = 0
        while pos < len(data):
            header = RecordBatchHeader.parse(data, pos)
            if header.base_offset >= offset:
                return bytes(out)
            out += data[pos : pos + header.size]
            pos += header.size
    return bytes(out)


def test_spark_plans_and_every_replica_rewrites_to_the_same_bytes(cluster: LocalCluster, spark: object) -> None:
    topic = "spark-compacted"
    create_topic(cluster, topic, 1, 3, SPARK_COMPACTED)
    rows = [(b"key-%03d" % k, b"value-%d-%03d" % (r, k) * 4) for r in range(6) for k in range(80)]
    rows += [(b"key-%03d" % k, None) for k in range(0, 80, 8)]
    # A plain producer: no producer state, so the plan alone decides the fate of every batch.
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 5, "batch.size": 4000})
    produced = produce_keyed(cluster.bootstrap, topic, rows, producer)
    end = produce_keyed(cluster.bootstrap, topic, [(b"filler", bytes(200)) for _ in range(60)], producer)[0][0]
    latest = {key: (offset, value) for offset, key, value in produced}
    before = {b: log_bytes_below(cluster.base_dir / f"broker-{b}" / "logs" / f"{topic}-0", end) for b in (1, 2, 3)}
    assert before[1] == before[2] == before[3]

    args = parse_args(["--bootstrap-servers", cluster.bootstrap, "--topics", topic, "--admin-url", cluster.http_url(1)])
    answers = run(spark, args)

    assert sorted(a["broker_id"] for a in answers) == [1, 2, 3]
    cleaned = min(a["cleaned_up_to"] for a in answers)
    assert cleaned >= end
    after = {b: log_bytes_below(cluster.base_dir / f"broker-{b}" / "logs" / f"{topic}-0", cleaned) for b in (1, 2, 3)}
    assert after[1] == after[2] == after[3]
    assert len(after[1]) < len(before[1]) / 3
    records = [(o, k, v) for _, o, k, v in read_all(cluster.bootstrap, topic) if o < end]
    # Tombstones stay (delete.retention.ms, a day by default, has not passed).
    assert records == sorted((o, k, v) for k, (o, v) in latest.items())


def test_spark_compaction_of_transactions_keeps_replicas_identical(cluster: LocalCluster, spark: object) -> None:
    """Committed and aborted transactions among plain records, and one left open: the plan
    stops at the LSO and holds no aborted record; every replica removes the aborted
    records by the same rules, and the replicas stay byte-identical."""
    topic = "spark-compacted-txn"
    create_topic(cluster, topic, 1, 3, SPARK_COMPACTED)
    keys = [b"key-%02d" % k for k in range(40)]
    txn = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": topic, "linger.ms": 5, "acks": "all"})
    txn.init_transactions(60)
    plain = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 5, "batch.size": 4000})

    def transaction(rows: list[tuple[bytes, bytes | None]], commit: bool | None) -> list[Record]:
        txn.begin_transaction()
        written = produce_keyed(cluster.bootstrap, topic, rows, txn)  # flushed: abort purges unsent records
        if commit is not None:
            txn.commit_transaction(60) if commit else txn.abort_transaction(60)
        return written

    transaction([(k, b"c1-" + k) for k in keys], commit=True)
    produce_keyed(cluster.bootstrap, topic, [(b"plain-%d" % i, b"plain") for i in range(10)], plain)
    transaction([(k, b"aborted-" + k) for k in keys], commit=False)
    transaction([(k, b"c2-" + k) for k in keys[:20]], commit=True)
    filler = produce_keyed(cluster.bootstrap, topic, [(b"filler", bytes(200)) for _ in range(60)], plain)
    # Left open: the LSO stays at its first record. Not right after the filler: the coordinator
    # writes the last commit's marker after it has answered, as Kafka's does, so the marker may
    # land after the filler.
    open_at = transaction([(k, b"open-" + k) for k in keys], commit=None)[0][0]
    produce_keyed(cluster.bootstrap, topic, [(b"filler", bytes(200)) for _ in range(60)], plain)
    expected = {k: b"c2-" + k for k in keys[:20]} | {k: b"c1-" + k for k in keys[20:]}
    expected |= {b"plain-%d" % i: b"plain" for i in range(10)} | {b"filler": bytes(200)}

    args = parse_args(["--bootstrap-servers", cluster.bootstrap, "--topics", topic, "--admin-url", cluster.http_url(1)])
    answers = run(spark, args)
    assert sorted(a["broker_id"] for a in answers) == [1, 2, 3]
    cleaned = min(a["cleaned_up_to"] for a in answers)
    assert filler[0][0] <= cleaned <= open_at  # never past the open transaction
    after = {b: log_bytes_below(cluster.base_dir / f"broker-{b}" / "logs" / f"{topic}-0", cleaned) for b in (1, 2, 3)}
    assert after[1] == after[2] == after[3]
    uncommitted = [(o, k, v) for _, o, k, v in read_all(cluster.bootstrap, topic, isolation="read_uncommitted")]
    assert not [v for o, _, v in uncommitted if o < cleaned and v.startswith(b"aborted")]
    assert {k: v for o, k, v in uncommitted if o < open_at} == expected
    txn.commit_transaction(60)
    committed = read_all(cluster.bootstrap, topic)
    assert {k: v for _, _, k, v in committed} == expected | {k: b"open-" + k for k in keys}
