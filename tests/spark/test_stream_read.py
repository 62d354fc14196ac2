"""spark.readStream.format("loglake"): checkpointed offsets, triggers, new partitions and topics."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from clients.client_helpers import create_topic
from source_helpers import add_partitions, offsets_of, produce, run_available_now, to_parquet, with_options


def read_to_parquet(spark, broker, topic: str, out: Path, checkpoint: Path, **options: object):
    stream = with_options(spark.readStream, broker, {"subscribe": topic, "startingOffsets": "earliest", **options})
    return run_available_now(to_parquet(stream.load(), out, checkpoint))


def last_checkpointed_offsets(checkpoint: Path) -> dict:
    last = max((checkpoint / "offsets").iterdir(), key=lambda p: int(p.name) if p.name.isdigit() else -1)
    return json.loads(last.read_text().splitlines()[-1])


def test_available_now_resumes_from_the_checkpoint_and_sees_new_partitions(loglake_spark, broker, topic, tmp_path):
    create_topic(broker.bootstrap, topic, partitions=2)
    produce(broker, topic, [{"value": b"%d" % i, "partition": i % 2} for i in range(40)])
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"

    query = read_to_parquet(loglake_spark, broker, topic, out, checkpoint, maxOffsetsPerTrigger="15")
    batches = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
    # maxOffsetsPerTrigger shared by backlog, rounded down per partition (Spark's rule): 7 + 7, 7 + 7, 6 + 6
    assert batches == [14, 14, 12]
    assert offsets_of(loglake_spark.read.parquet(str(out))) == [(p, o) for p in range(2) for o in range(20)]
    assert last_checkpointed_offsets(checkpoint) == {topic: {"0": 20, "1": 20}}

    add_partitions(broker, topic, 3)
    produce(broker, topic, [{"value": b"%d" % i, "partition": i % 3} for i in range(30)])
    read_to_parquet(loglake_spark, broker, topic, out, checkpoint)
    # Every record exactly once: the restart resumed at the checkpointed offsets.
    assert offsets_of(loglake_spark.read.parquet(str(out))) == [(p, o) for p in range(2) for o in range(30)] + [
        (2, o) for o in range(10)
    ]
    assert last_checkpointed_offsets(checkpoint) == {topic: {"0": 30, "1": 30, "2": 10}}


def test_processing_time_trigger_picks_up_new_topics_of_a_pattern(loglake_spark, broker, topic, tmp_path):
    create_topic(broker.bootstrap, f"{topic}-a", partitions=1)
    produce(broker, f"{topic}-a", [{"value": b"a%d" % i} for i in range(10)])
    stream = with_options(
        loglake_spark.readStream, broker, {"subscribePattern": f"{topic}-.*", "startingOffsets": "earliest"}
    )
    name = f"q{abs(hash(topic))}"
    query = (
        stream.load()
        .writeStream.format("memory")
        .queryName(name)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(processingTime="100 milliseconds")
        .start()
    )
    try:
        query.processAllAvailable()
        assert loglake_spark.table(name).count() == 10
        create_topic(broker.bootstrap, f"{topic}-b", partitions=2)
        produce(broker, f"{topic}-b", [{"value": b"b%d" % i, "partition": i % 2} for i in range(6)])
        produce(broker, f"{topic}-a", [{"value": b"a%d" % i} for i in range(10, 12)])
        query.processAllAvailable()
        rows = loglake_spark.table(name).select("topic", "partition", "offset", "value").collect()
        assert sorted((r.topic, r.partition, r.offset) for r in rows) == [(f"{topic}-a", 0, o) for o in range(12)] + [
            (f"{topic}-b", p, o) for p in range(2) for o in range(3)
        ]
    finally:
        query.stop()


def test_streaming_starts_at_the_end_by_default(loglake_spark, broker, topic, tmp_path):
    create_topic(broker.bootstrap, topic, partitions=1)
    produce(broker, topic, [{"value": b"old"}])
    name = f"q{abs(hash(topic))}"
    query = (
        with_options(loglake_spark.readStream, broker, {"subscribe": topic})
        .load()
        .writeStream.format("memory")
        .queryName(name)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .start()
    )
    try:
        query.processAllAvailable()
        produce(broker, topic, [{"value": b"new"}])
        query.processAllAvailable()
        assert [(r.offset, r.value) for r in loglake_spark.table(name).collect()] == [(1, b"new")]
    finally:
        query.stop()


def test_bad_options_stop_the_query_before_any_batch(loglake_spark, broker, topic, tmp_path):
    stream = with_options(loglake_spark.readStream, broker, {"subscribe": topic})  # never created
    query = (
        stream.load()
        .writeStream.format("memory")
        .queryName(f"q{abs(hash(topic))}")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .start()
    )
    with pytest.raises(Exception, match=f"subscribe: topic '{topic}' is not known"):
        query.awaitTermination(60)
    assert query.recentProgress == []


def test_a_schema_streams_those_columns(loglake_spark, broker, topic, tmp_path):
    create_topic(broker.bootstrap, topic, partitions=2)
    produce(broker, topic, [{"value": b"v%d" % i, "key": b"k%d" % i, "partition": i % 2} for i in range(30)])
    stream = with_options(
        loglake_spark.readStream.schema("value binary, partition int, offset bigint"),
        broker,
        {"subscribe": topic, "startingOffsets": "earliest", "maxOffsetsPerTrigger": "10"},
    ).load()
    out = tmp_path / "out"
    run_available_now(to_parquet(stream, out, tmp_path / "checkpoint"))
    written = loglake_spark.read.parquet(str(out))
    assert written.columns == ["value", "partition", "offset"]
    rows = sorted((r.partition, r.offset, r.value) for r in written.collect())
    assert rows == sorted((i % 2, i // 2, b"v%d" % i) for i in range(30))
