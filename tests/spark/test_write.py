"""df.write / writeStream .format("loglake"): Spark's Kafka sink shape, idempotent producer."""

from __future__ import annotations

import pytest
from clients.client_helpers import create_topic, fetch_batches, unique_name
from pyspark.sql.types import ArrayType, BinaryType, IntegerType, StringType, StructField, StructType
from source_helpers import run_available_now, with_options

from loglake.partitioner import partition_for_key

HEADERS = ArrayType(StructType([StructField("key", StringType()), StructField("value", BinaryType())]))


def read_back(spark, broker, topic: str) -> list[tuple]:
    df = with_options(spark.read, broker, {"subscribe": topic, "includeHeaders": "true"}).load()
    return sorted(
        (r.partition, r.offset, r.key, r.value, [tuple(h) for h in r.headers] if r.headers else None)
        for r in df.collect()
    )


def test_batch_write_with_key_value_partition_headers(loglake_spark, broker, topic) -> None:
    create_topic(broker.bootstrap, topic, partitions=2)
    schema = StructType(
        [
            StructField("key", StringType()),
            StructField("value", BinaryType()),
            StructField("partition", IntegerType()),
            StructField("headers", HEADERS),
        ]
    )
    rows = [(f"k{i}", b"v%d" % i, i % 2, [("h", b"%d" % i)] if i % 2 else None) for i in range(10)]
    df = loglake_spark.createDataFrame(rows, schema).coalesce(1)  # one task: offsets in row order
    with_options(df.write, broker, {"topic": topic}).mode("append").save()
    assert read_back(loglake_spark, broker, topic) == sorted(
        (i % 2, i // 2, b"k%d" % i, b"v%d" % i, [("h", b"%d" % i)] if i % 2 else None) for i in range(10)
    )
    # Through the idempotent producer: every batch carries a producer id.
    assert all(header.producer_id >= 0 for header, _ in fetch_batches(broker.bootstrap, topic, 0))


def test_topic_column_routes_rows(loglake_spark, broker, topic) -> None:
    create_topic(broker.bootstrap, f"{topic}-a", partitions=1)
    create_topic(broker.bootstrap, f"{topic}-b", partitions=1)
    df = loglake_spark.createDataFrame(
        [(f"{topic}-a", "x"), (f"{topic}-b", "y"), (f"{topic}-a", "z")], "topic string, value string"
    )
    with_options(df.coalesce(1).write, broker, {}).mode("append").save()
    assert [r[3] for r in read_back(loglake_spark, broker, f"{topic}-a")] == [b"x", b"z"]
    assert [r[3] for r in read_back(loglake_spark, broker, f"{topic}-b")] == [b"y"]


def test_keyed_rows_without_a_partition_go_where_the_java_producer_puts_them(loglake_spark, broker, topic) -> None:
    create_topic(broker.bootstrap, topic, partitions=5)
    keys = [f"user-{i}" for i in range(40)]
    df = loglake_spark.createDataFrame([(k, k) for k in keys], "key string, value string")
    with_options(df.write, broker, {"topic": topic}).mode("append").save()
    placed = {r[2].decode(): r[0] for r in read_back(loglake_spark, broker, topic)}
    assert placed == {k: partition_for_key(k.encode(), 5) for k in keys}  # murmur2, as Spark's Kafka sink


@pytest.mark.parametrize(
    ("ddl", "options", "mode", "message"),
    [
        ("key string", {"topic": "t"}, "append", "needs a value column"),
        ("value string", {}, "append", "topic: no topic option and no topic column"),
        ("value int", {"topic": "t"}, "append", "column value has type int"),
        ("value string", {"topic": "t"}, "overwrite", "never overwritten"),
        ("value string", {"topic": "t", "exactly.once": "maybe"}, "append", "exactly.once must be true or false"),
        (
            "value string",
            {"topic": "t", "exactly.once": "true", "kafka.linger.ms": "5"},
            "append",
            "kafka.linger.ms: exactly-once writes use",
        ),
        (
            "value string",
            {"topic": "t", "exactly.once": "false", "transactional.id.prefix": "x"},
            "append",
            "transactional.id.prefix is for exactly-once",
        ),
        (
            "value string",
            {"topic": "t", "transactional.id.prefix": " "},
            "append",
            "transactional.id.prefix must not be empty",
        ),
        ("value string", {"topic": "t", "txnAppId": "a"}, "append", "txnAppId and txnVersion go together"),
        ("value string", {"topic": "t", "txnAppId": "a", "txnVersion": "x"}, "append", "txnVersion must be a non-neg"),
        (
            "value string",
            {"topic": "t", "exactly.once": "false", "txnAppId": "a", "txnVersion": "1"},
            "append",
            "txnAppId is for exactly-once",
        ),
        (
            "value string",
            {"topic": "t", "exactly.once": "true", "kafka.acks": "1"},
            "append",
            "transactions need acks=all",
        ),
        (
            "value string",
            {"topic": "t", "exactly.once": "true", "kafka.transaction.timeout.ms": "0"},
            "append",
            "transaction.timeout.ms must be a positive",
        ),
        (
            "value string",
            {"topic": "t", "exactly.once": "true", "kafka.compression.type": "brotli"},
            "append",
            "kafka.compression.type must be",
        ),
    ],  # fmt: skip
)
def test_bad_writes_fail_before_any_job(loglake_spark, broker, ddl, options, mode, message) -> None:
    df = loglake_spark.createDataFrame([], ddl)
    sc = loglake_spark.sparkContext
    group = unique_name("bad-write")
    sc.setJobGroup(group, "bad write")
    try:
        with pytest.raises(Exception, match=message):
            with_options(df.write, broker, options).mode(mode).save()
    finally:
        sc.setLocalProperty("spark.jobGroup.id", None)
    assert list(sc.statusTracker().getJobIdsForGroup(group)) == []


@pytest.mark.parametrize("exactly_once", ["true", "false"])
def test_stream_from_topic_to_topic(loglake_spark, broker, topic, tmp_path, exactly_once) -> None:
    from source_helpers import produce

    create_topic(broker.bootstrap, f"{topic}-in", partitions=2)
    create_topic(broker.bootstrap, f"{topic}-out", partitions=1)
    produce(broker, f"{topic}-in", [{"key": b"k%d" % i, "value": b"v%d" % i, "partition": i % 2} for i in range(20)])
    source = with_options(loglake_spark.readStream, broker, {"subscribe": f"{topic}-in", "startingOffsets": "earliest"})
    sink = with_options(
        source.load().select("key", "value").writeStream,
        broker,
        {"topic": f"{topic}-out", "exactly.once": exactly_once},
    )
    run_available_now(sink.option("checkpointLocation", str(tmp_path / "checkpoint")))
    written = read_back(loglake_spark, broker, f"{topic}-out")
    assert sorted((r[2], r[3]) for r in written) == sorted((b"k%d" % i, b"v%d" % i) for i in range(20))
    headers = [h for h, _ in fetch_batches(broker.bootstrap, f"{topic}-out", 0) if not h.is_control]
    assert {h.is_transactional for h in headers} == {exactly_once == "true"}
