"""The sink's exactly-once path: streaming queries write each micro-batch in the tasks'
transactions, committed with the batch; batch writes when asked; a failed write leaves nothing
visible to read_committed readers and no transaction open."""

from __future__ import annotations

import pytest
from clients.client_helpers import create_topic, fetch_batches, unique_name
from source_helpers import produce, run_available_now, with_options
from txn_sink_helpers import sink_progress, topic_values, wait_until_stable

from loglake.record.compression import CompressionType
from loglake.spark.protocol_client import TopicPartition
from loglake.spark.sink import DEFAULT_TRANSACTIONAL_ID_PREFIX


def _data_batches(broker, topic: str, partitions: int) -> list:
    return [h for p in range(partitions) for h, _ in fetch_batches(broker.bootstrap, topic, p) if not h.is_control]


def test_stream_writes_each_batch_in_transactions_and_records_progress(loglake_spark, broker, topic, tmp_path) -> None:
    create_topic(broker.bootstrap, f"{topic}-in", partitions=3)
    create_topic(broker.bootstrap, f"{topic}-out", partitions=2)
    values = [b"v%03d" % i for i in range(60)]
    produce(broker, f"{topic}-in", [{"key": b"k%d" % i, "value": v, "partition": i % 3} for i, v in enumerate(values)])
    source = with_options(
        loglake_spark.readStream,
        broker,
        {"subscribe": f"{topic}-in", "startingOffsets": "earliest", "maxOffsetsPerTrigger": "25"},
    )
    sink = with_options(source.load().select("key", "value").writeStream, broker, {"topic": f"{topic}-out"})
    query = run_available_now(sink.option("checkpointLocation", str(tmp_path / "checkpoint")))

    ends = wait_until_stable(broker, f"{topic}-out", 2)
    assert topic_values(loglake_spark, broker, f"{topic}-out") == values
    assert topic_values(loglake_spark, broker, f"{topic}-out", "read_uncommitted") == values
    data = _data_batches(broker, f"{topic}-out", 2)
    assert data and all(h.is_transactional for h in data)
    # Each task's group: the last micro-batch it committed, and where its records ended.
    last_batch = query.lastProgress["batchId"]
    progress = [sink_progress(broker, f"{DEFAULT_TRANSACTIONAL_ID_PREFIX}-{query.id}-{p}") for p in range(3)]
    assert max(latest.batch_id for latest, _ in progress if latest) == last_batch
    for _, offsets in progress:
        assert all(0 < offset <= ends[tp.partition] for tp, offset in offsets.items())
    assert {tp for _, offsets in progress for tp in offsets} == {TopicPartition(f"{topic}-out", p) for p in (0, 1)}


def test_batch_write_is_transactional_when_asked(loglake_spark, broker, topic) -> None:
    create_topic(broker.bootstrap, topic, partitions=2)
    df = loglake_spark.createDataFrame([(b"k%d" % i, b"v%d" % i) for i in range(20)], "key binary, value binary")
    with_options(df.write, broker, {"topic": topic}).mode("append").save()
    assert not any(h.is_transactional for h in _data_batches(broker, topic, 2))  # at least once by default

    options = {"topic": topic, "transactional.id.prefix": unique_name("batch"), "kafka.compression.type": "zstd"}
    with_options(df.repartition(3).write, broker, options).mode("append").save()
    wait_until_stable(broker, topic, 2)
    transactional = [h for h in _data_batches(broker, topic, 2) if h.is_transactional]
    assert sum(h.record_count for h in transactional) == 20
    assert {h.compression for h in transactional} == {CompressionType.ZSTD}
    assert topic_values(loglake_spark, broker, topic) == sorted([b"v%d" % i for i in range(20)] * 2)


def test_failed_batch_write_leaves_nothing_committed_and_no_transaction_open(loglake_spark, broker, topic) -> None:
    create_topic(broker.bootstrap, topic, partitions=1)
    # Row 9 names a partition the topic lacks: the task fails after producing its first Arrow batch.
    rows = [(b"v%d" % i, 99 if i == 9 else 0) for i in range(10)]
    df = loglake_spark.createDataFrame(rows, "value binary, partition int").coalesce(1)
    conf = loglake_spark.conf
    conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "5")
    try:
        with pytest.raises(Exception, match="has no partition 99"):
            with_options(df.write, broker, {"topic": topic, "exactly.once": "true"}).mode("append").save()
    finally:
        conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")
    wait_until_stable(broker, topic, 1)  # the task aborted its own transaction
    assert topic_values(loglake_spark, broker, topic, "read_uncommitted") == [b"v%d" % i for i in range(5)]
    assert topic_values(loglake_spark, broker, topic) == []
