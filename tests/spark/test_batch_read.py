"""spark.read.format("loglake") against a broker process: what was produced comes back, with
Spark's Kafka source schema, options and errors."""

from __future__ import annotations

import base64
from datetime import UTC, datetime

import httpx
import pytest
from chispa import assert_df_equality
from clients.client_helpers import create_topic, unique_name
from source_helpers import delete_records, offsets_of, produce, with_options

from harness.process import BrokerProcess

BASE_TS = 1_700_000_000_000


def reader(spark, broker: BrokerProcess, **options: object):
    return with_options(spark.read, broker, options).load()


def ts(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, tz=UTC)


def expected_df(spark, rows: list[tuple], include_headers: bool):
    from loglake.spark.source import kafka_schema

    return spark.createDataFrame(rows, schema=kafka_schema(include_headers))


def numbered(n: int, partitions: int) -> list[dict]:
    """Records with keys, values (some null), headers (some absent or null-valued) and timestamps."""
    records = []
    for i in range(n):
        headers = [("n", b"%d" % i), ("null", None)] if i % 3 == 0 else None
        records.append(
            {
                "key": None if i % 7 == 0 else b"key-%d" % i,
                "value": None if i % 11 == 0 else b"value-%d-" % i + b"x" * (i % 50),
                "partition": i % partitions,
                "timestamp": BASE_TS + i * 1000,
                "headers": headers,
            }
        )
    return records


def expected_rows(topic: str, records: list[dict], partitions: int, with_headers: bool) -> list[tuple]:
    rows = []
    next_offset = [0] * partitions
    for r in records:
        p = r["partition"]
        row = (r["key"], r["value"], topic, p, next_offset[p], ts(r["timestamp"]), 0)
        if with_headers:
            row += ([(k, v) for k, v in r["headers"]] if r["headers"] else None,)
        rows.append(row)
        next_offset[p] += 1
    return rows


@pytest.mark.parametrize(
    "ddl",
    ["partition int, value binary", "headers array<struct<key: string, value: binary>>, offset bigint, key binary"],
)
def test_a_schema_reads_those_columns_in_that_order(loglake_spark, broker, topic, ddl: str) -> None:
    create_topic(broker.bootstrap, topic, partitions=3)
    records = numbered(300, 3)
    produce(broker, topic, records, **{"compression.type": "lz4"})
    got = with_options(loglake_spark.read.schema(ddl), broker, {"subscribe": topic}).load()
    every = expected_df(loglake_spark, expected_rows(topic, records, 3, True), True)
    want = every.select(*[field.name for field in got.schema.fields])
    assert got.schema == want.schema
    assert_df_equality(got, want, ignore_row_order=True)


@pytest.mark.parametrize(
    ("ddl", "message"),
    [
        ("partition int, payload binary", "no column 'payload'; its columns are key binary, value binary, topic"),
        ("partition bigint", "column partition is int, not bigint"),
        ("value binary, value binary", "name each column once"),
    ],
)
def test_a_schema_with_other_columns_is_refused_naming_the_columns(loglake_spark, broker, topic, ddl, message):
    create_topic(broker.bootstrap, topic, partitions=1)
    with pytest.raises(Exception, match=message):
        with_options(loglake_spark.read.schema(ddl), broker, {"subscribe": topic}).load().collect()


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_every_codec_reads_back_what_confluent_kafka_produced(loglake_spark, broker, topic, codec) -> None:
    create_topic(broker.bootstrap, topic, partitions=3)
    records = numbered(600, 3)
    produce(broker, topic, records, **{"compression.type": codec})
    got = reader(loglake_spark, broker, subscribe=topic, includeHeaders="true")
    want = expected_df(loglake_spark, expected_rows(topic, records, 3, True), True)
    assert_df_equality(got, want, ignore_row_order=True)


def test_without_include_headers_the_schema_is_spark_kafka_sources(loglake_spark, broker, topic) -> None:
    create_topic(broker.bootstrap, topic, partitions=2)
    records = numbered(50, 2)
    produce(broker, topic, records)
    got = reader(loglake_spark, broker, subscribe=topic)
    assert got.schema.simpleString() == (
        "struct<key:binary,value:binary,topic:string,partition:int,offset:bigint,timestamp:timestamp,timestampType:int>"
    )
    want = expected_df(loglake_spark, expected_rows(topic, records, 2, False), False)
    assert_df_equality(got, want, ignore_row_order=True)


def test_records_produced_over_http(loglake_spark, broker, topic) -> None:
    def b64(data: bytes) -> str:
        return base64.b64encode(data).decode()

    create_topic(broker.bootstrap, topic, partitions=1)
    body = {
        "records": [
            {"key": b64(b"k0"), "value": b64(b"\xffv0"), "headers": [{"key": "h", "value": b64(b"x")}]},
            {"key": None, "value": None},
            {"value": b64(b""), "headers": [{"key": "n", "value": None}]},
        ]
    }
    r = httpx.post(
        f"{broker.http_url}/topics/{topic}", json=body, headers={"content-type": "application/vnd.kafka.binary.v2+json"}
    )
    assert r.status_code == 200, r.text
    got = reader(loglake_spark, broker, subscribe=topic, includeHeaders="true").drop("timestamp").orderBy("offset")
    assert [tuple(row) for row in got.collect()] == [
        (b"k0", b"\xffv0", topic, 0, 0, 0, [("h", b"x")]),
        (None, None, topic, 0, 1, 0, None),
        (None, b"", topic, 0, 2, 0, [("n", None)]),
    ]


def test_log_append_time_topics(loglake_spark, broker, topic) -> None:
    create_topic(broker.bootstrap, topic, partitions=1, config={"message.timestamp.type": "LogAppendTime"})
    produce(broker, topic, [{"value": b"v%d" % i, "timestamp": BASE_TS} for i in range(5)])
    rows = reader(loglake_spark, broker, subscribe=topic).select("timestamp", "timestampType").collect()
    assert len(rows) == 5
    assert {r.timestampType for r in rows} == {1}
    # The broker's append time, not the producer's timestamp.
    assert all(r.timestamp > ts(BASE_TS).replace(tzinfo=None) for r in rows)  # collected in UTC, naive


def test_offset_options(loglake_spark, broker, topic) -> None:
    create_topic(broker.bootstrap, topic, partitions=2)
    produce(broker, topic, numbered(40, 2))  # 20 records per partition, 1 s apart in pairs

    def read(**options: object) -> list[tuple[int, int]]:
        return offsets_of(reader(loglake_spark, broker, subscribe=topic, **options))

    every = [(p, o) for p in range(2) for o in range(20)]
    assert read() == every
    assert read(startingOffsets="earliest", endingOffsets="latest") == every
    assert read(startingOffsets={topic: {"0": 5, "1": -2}}, endingOffsets={topic: {"0": 7, "1": -1}}) == [
        (0, 5),
        (0, 6),
    ] + [(1, o) for o in range(20)]
    # Record i is at partition i % 2, offset i // 2, timestamp BASE_TS + i s.
    assert read(startingTimestamp=str(BASE_TS + 30_000)) == [(p, o) for p in range(2) for o in range(15, 20)]
    assert read(endingTimestamp=str(BASE_TS + 4_000)) == [(0, 0), (0, 1), (1, 0), (1, 1)]
    # An end timestamp no record reaches ends at the log's end.
    assert read(
        startingOffsetsByTimestamp={topic: {"0": BASE_TS + 36_000, "1": BASE_TS}},
        endingOffsetsByTimestamp={topic: {"0": BASE_TS + 10**9, "1": BASE_TS + 4_000}},
    ) == [(0, 18), (0, 19), (1, 0), (1, 1)]
    # No record that late: an error by default, the end of the log with the "latest" strategy.
    with pytest.raises(Exception, match="startingTimestamp"):
        read(startingTimestamp=str(BASE_TS + 10**9))
    assert read(startingTimestamp=str(BASE_TS + 10**9), startingOffsetsByTimestampStrategy="latest") == []


def test_topic_selection(loglake_spark, broker, topic) -> None:
    create_topic(broker.bootstrap, f"{topic}-a", partitions=2)
    create_topic(broker.bootstrap, f"{topic}-b", partitions=1)
    produce(broker, f"{topic}-a", [{"value": b"a", "partition": p} for p in (0, 1)])
    produce(broker, f"{topic}-b", [{"value": b"b"}])

    def topics_and_partitions(**options: object) -> list[tuple[str, int]]:
        df = reader(loglake_spark, broker, **options)
        return sorted((r.topic, r.partition) for r in df.select("topic", "partition").collect())

    both = [(f"{topic}-a", 0), (f"{topic}-a", 1), (f"{topic}-b", 0)]
    assert topics_and_partitions(subscribe=f"{topic}-a,{topic}-b") == both
    assert topics_and_partitions(subscribePattern=f"{topic}-.*") == both
    assert topics_and_partitions(subscribePattern=f"{topic}-") == []  # whole names only, as Java's matches()
    assert topics_and_partitions(assign={f"{topic}-a": [1], f"{topic}-b": [0]}) == both[1:]


def test_long_ranges_split_into_input_partitions(loglake_spark, broker, topic) -> None:
    create_topic(broker.bootstrap, topic, partitions=2)
    produce(broker, topic, [{"value": b"%d" % i, "partition": i % 2} for i in range(1000)])
    assert reader(loglake_spark, broker, subscribe=topic).rdd.getNumPartitions() == 2
    # Spark's rule: each range gets round(its share of minPartitions) parts, half up.
    split = reader(loglake_spark, broker, subscribe=topic, minPartitions="5")
    assert split.rdd.getNumPartitions() == 6
    by_size = reader(loglake_spark, broker, subscribe=topic, maxRecordsPerPartition="100")
    assert by_size.rdd.getNumPartitions() == 10
    assert offsets_of(split) == offsets_of(by_size) == [(p, o) for p in range(2) for o in range(500)]


def test_offsets_gone_from_the_log_fail_or_are_skipped(loglake_spark, broker, topic) -> None:
    create_topic(broker.bootstrap, topic, partitions=1)
    produce(broker, topic, [{"value": b"%d" % i} for i in range(10)])
    delete_records(broker, topic, 0, 6)
    start = {topic: {"0": 2}}
    with pytest.raises(Exception, match="failOnDataLoss") as error:
        reader(loglake_spark, broker, subscribe=topic, startingOffsets=start).count()
    assert "offset 2" in str(error.value) and "log start 6" in str(error.value)
    skipped = reader(loglake_spark, broker, subscribe=topic, startingOffsets=start, failOnDataLoss="false")
    assert offsets_of(skipped) == [(0, o) for o in range(6, 10)]
    assert offsets_of(reader(loglake_spark, broker, subscribe=topic)) == [(0, o) for o in range(6, 10)]


def test_log_start_moving_after_planning(broker, topic) -> None:
    """The range was planned, then DeleteRecords moved the log start: the task reports data loss."""
    from loglake.spark.offset_ranges import DataLossError, plan_batch
    from loglake.spark.options import parse_read_options
    from loglake.spark.range_reader import read_range

    create_topic(broker.bootstrap, topic, partitions=1)
    produce(broker, topic, [{"value": b"%d" % i} for i in range(10)])

    def options(**extra: str):
        return parse_read_options(
            {"kafka.bootstrap.servers": broker.bootstrap, "subscribe": topic, **extra}, streaming=False
        )

    (planned,) = plan_batch(options())
    delete_records(broker, topic, 0, 4)
    with pytest.raises(DataLossError, match="offset 0 of .* the log now starts at 4"):
        list(read_range(options(), planned))
    batches = read_range(options(failOnDataLoss="false"), planned)
    assert [o for d in batches for o in d.batch.column("offset").to_pylist()] == list(range(4, 10))


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"subscribe": "no-such-topic-xyz"}, "subscribe: topic 'no-such-topic-xyz' is not known"),
        ({"subscribe": "{topic}", "assign": '{"{topic}": [0]}'}, "Only one of the options subscribe"),
        ({}, "One of the options subscribe, subscribePattern, assign"),
        ({"subscribe": "{topic}", "startingOffsets": '{"{topic}": {"0": '}, "startingOffsets: malformed JSON"),
        ({"subscribe": "{topic}", "endingOffsets": '{"{topic}": {"1": 3}}'}, "endingOffsets must name every partition"),
        ({"assign": '{"{topic}": [0, 5]}'}, "assign: no such partition .*-5"),
        ({"assign": '["{topic}"]'}, "assign: expected a JSON object"),
        ({"subscribe": "{topic}", "startingOffsets": "latest"}, "startingOffsets: latest is not allowed in batch"),
        ({"subscribe": "{topic}", "minPartitions": "0"}, "minPartitions must be a positive integer"),
        ({"subscribe": "{topic}", "failOnDataLoss": "maybe"}, "failOnDataLoss must be true or false"),
        (
            {"subscribe": "{topic}", "kafka.isolation.level": "dirty"},
            "kafka.isolation.level must be read_committed or read_uncommitted",
        ),
        ({"subscribe": "{topic}", "kafka.bootstrap.servers": "127.0.0.1:1"}, "kafka.bootstrap.servers: no broker"),
    ],
)
def test_bad_options_fail_before_any_job(loglake_spark, broker, topic, options, message) -> None:
    create_topic(broker.bootstrap, topic, partitions=1)
    options = {k: v.replace("{topic}", topic) for k, v in options.items()}
    sc = loglake_spark.sparkContext
    group = unique_name("bad-options")
    sc.setJobGroup(group, "bad options")
    try:
        with pytest.raises(Exception, match=message):
            reader(loglake_spark, broker, **options).collect()
    finally:
        sc.setLocalProperty("spark.jobGroup.id", None)
    assert list(sc.statusTracker().getJobIdsForGroup(group)) == []
