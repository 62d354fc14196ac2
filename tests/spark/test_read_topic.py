"""loglake.spark.read_topic: the tiered part of a topic read by Spark's Parquet reader from one
pinned Delta version, the rest by the loglake source, with no gap and no duplicate at the seam;
tables a plain Parquet scan cannot read fall back to the source."""

from __future__ import annotations

import json
import re

import pytest
from deltalake import DeltaTable, TableFeatures

from clients.client_helpers import create_topic
from clients.tiering_helpers import TIERED, produce, wait_for_local_deletion
from jobs.tier import parse_args, run
from loglake.spark import read_topic


def tiered_topic(spark, broker, topic: str, tiered: int, tail: int) -> tuple[list[tuple[int, bytes, bytes]], int]:
    """A topic whose first records are tiered (and deleted from the log) and whose last `tail`
    are only in the log; its records as (offset, key, value) and the tiered end."""
    create_topic(broker.bootstrap, topic, config=TIERED)
    records = produce(broker, topic, 0, tiered)
    run(spark, parse_args(["--bootstrap-servers", broker.bootstrap, "--topics", topic]))
    end = wait_for_local_deletion(broker, topic)["tiered_offset"]
    records += produce(broker, topic, tiered, tail)
    return [(offset, key, value) for offset, (key, value) in enumerate(records)], end


def scans_parquet(df) -> bool:
    return "FileScan parquet" in df._jdf.queryExecution().executedPlan().toString()


def union_is_fused(df) -> bool:
    """Whether an aggregation over `df` compiles its union into one whole-stage stage with the
    scans and the aggregation (`*(n) Union` in the executed plan; without fusion the union has no
    codegen id and each child copies its rows out of its own stage)."""
    query = df.groupBy("partition").count()
    query.collect()  # the adaptive plan's final form exists once it ran
    plan = query._jdf.queryExecution().executedPlan().toString()
    return re.search(r"\*\(\d+\) Union", plan) is not None


def rows_of(df) -> list[tuple[int, bytes, bytes]]:
    return sorted((r.offset, bytes(r.key), bytes(r.value)) for r in df.select("offset", "key", "value").collect())


def test_the_tiered_part_is_scanned_as_parquet_and_meets_the_log_without_gap_or_duplicate(
    loglake_spark, tiering_broker, topic
) -> None:
    records, tiered_end = tiered_topic(loglake_spark, tiering_broker, topic, 400, 120)
    assert 0 < tiered_end < len(records)
    df = read_topic(loglake_spark, topic, **{"kafka.bootstrap.servers": tiering_broker.bootstrap})
    assert scans_parquet(df)
    assert union_is_fused(df)  # loglake's session settings (session_settings.UNION_CODEGEN)
    assert df.schema.simpleString().startswith("struct<key:binary,value:binary,topic:string,partition:int,")
    assert rows_of(df) == records
    assert {(r.topic, r.partition) for r in df.select("topic", "partition").distinct().collect()} == {(topic, 0)}

    # A range across the seam, with a schema of two columns in another order.
    seam = read_topic(
        loglake_spark,
        topic,
        schema="offset bigint, value binary",
        startingOffsets={topic: {"0": tiered_end - 5}},
        endingOffsets={topic: {"0": tiered_end + 5}},
        **{"kafka.bootstrap.servers": tiering_broker.bootstrap},
    )
    assert seam.columns == ["offset", "value"]
    assert sorted(tuple(r) for r in seam.collect()) == [(o, v) for o, _, v in records[tiered_end - 5 : tiered_end + 5]]
    # The same range from the loglake source alone: what read_topic must equal.
    source = (
        loglake_spark.read.format("loglake")
        .option("kafka.bootstrap.servers", tiering_broker.bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", json.dumps({topic: {"0": tiered_end - 5}}))
        .option("endingOffsets", json.dumps({topic: {"0": tiered_end + 5}}))
        .load()
    )
    assert sorted(seam.collect()) == sorted(source.select("offset", "value").collect())


def test_a_read_stays_on_the_version_it_pinned(loglake_spark, tiering_broker, lake, topic) -> None:
    records, _ = tiered_topic(loglake_spark, tiering_broker, topic, 300, 20)
    df = read_topic(loglake_spark, topic, **{"kafka.bootstrap.servers": tiering_broker.bootstrap})
    # A later version (what lake retention does) removes the first 50 rows.
    DeltaTable(str(lake / topic)).delete('"offset" < 50')
    assert rows_of(df) == records
    fresh = read_topic(loglake_spark, topic, **{"kafka.bootstrap.servers": tiering_broker.bootstrap})
    assert rows_of(fresh) == records[50:]


@pytest.mark.parametrize("feature", [TableFeatures.DeletionVectors, TableFeatures.ColumnMapping])
def test_tables_a_plain_parquet_scan_cannot_read_fall_back_to_the_source(
    loglake_spark, tiering_broker, lake, topic, feature
) -> None:
    records, _ = tiered_topic(loglake_spark, tiering_broker, topic, 300, 20)
    DeltaTable(str(lake / topic)).alter.add_feature(feature, allow_protocol_versions_increase=True)
    df = read_topic(loglake_spark, topic, **{"kafka.bootstrap.servers": tiering_broker.bootstrap})
    assert not scans_parquet(df)
    assert rows_of(df) == records


def test_aborted_rows_in_the_lake_read_as_the_log_does(loglake_spark, tiering_broker, topic) -> None:
    """A tiered aborted transaction: read_committed leaves its rows out (the files holding
    them are filtered, the others scanned whole), read_uncommitted keeps them; both equal the
    untiered log's read."""
    from confluent_kafka import Producer

    broker = tiering_broker
    create_topic(broker.bootstrap, topic, config=TIERED)
    txn = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": topic, "linger.ms": 5})
    txn.init_transactions(30)
    produce(broker, topic, 0, 100)
    txn.begin_transaction()
    for i in range(10):
        txn.produce(topic, b"aborted-%d" % i, key=b"aborted-%d" % i, partition=0)
    txn.flush(30)
    txn.abort_transaction(30)
    produce(broker, topic, 100, 200)

    def read_all_ways(isolation: str) -> list[tuple[int, bytes, bytes]]:
        options = {"kafka.bootstrap.servers": broker.bootstrap, "kafka.isolation.level": isolation}
        source = loglake_spark.read.format("loglake").options(subscribe=topic, **options).load()
        via_read_topic = rows_of(read_topic(loglake_spark, topic, **options))
        assert via_read_topic == rows_of(source)
        return via_read_topic

    untiered = {i: read_all_ways(i) for i in ("read_committed", "read_uncommitted")}
    assert len(untiered["read_uncommitted"]) == len(untiered["read_committed"]) + 10
    run(loglake_spark, parse_args(["--bootstrap-servers", broker.bootstrap, "--topics", topic]))
    assert wait_for_local_deletion(broker, topic)["tiered_offset"] > 110
    for isolation, rows in untiered.items():
        options = {"kafka.bootstrap.servers": broker.bootstrap, "kafka.isolation.level": isolation}
        df = read_topic(loglake_spark, topic, **options)
        assert scans_parquet(df)
        assert rows_of(df) == rows
