"""The exactly-once Delta writer on synthetic Kafka-shaped batches (no broker)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from chispa import assert_df_equality
from deltalake import DeltaTable, QueryBuilder, write_deltalake
from kafka_frames import BASE_TIMESTAMP, concat, kafka_records
from loglake.spark.delta_arrow import nullable_schema
from loglake.spark.delta_sink import (
    DeltaSink,
    DeltaSinkOptions,
    committed_version,
    delta_spark_available,
    delta_spark_missing,
    table_frame,
)
from pyspark.sql import functions as F
from source_helpers import records_stay_off_the_driver

TABLE_ORDER = ["topic", "partition", "offset"]


def read_table(spark, path: Path):
    """The Delta table as a Spark DataFrame, read by delta-rs (no Delta jars in the test session)."""
    return spark.createDataFrame(DeltaTable(str(path)).to_pyarrow_table()).orderBy(*TABLE_ORDER)


def expected_rows(spark, records: pa.Table):
    """What the sink must store for `records`: the table's columns in the table's order."""
    frame = spark.createDataFrame(records)
    return frame.select(*TABLE_ORDER, "timestamp", "key", "value", "headers").orderBy(*TABLE_ORDER)


def data_commits(path: Path) -> int:
    """Commits that added rows (the first one creates the table with its files)."""
    return sum(1 for entry in DeltaTable(str(path)).history() if entry["operation"] in ("WRITE", "CREATE TABLE"))


def test_replayed_batch_is_a_no_op(spark, tmp_path: Path) -> None:
    sink = DeltaSink(spark, DeltaSinkOptions(table=str(tmp_path / "t")))
    first = kafka_records("orders", 0, range(10))
    second = kafka_records("orders", 0, range(10, 15))

    assert sink.write_batch(spark.createDataFrame(first), 0, "query-a").rows_written == 10
    replay = sink.write_batch(spark.createDataFrame(first), 0, "query-a")
    assert replay.replay_skipped and replay.rows_written == 0
    assert sink.write_batch(spark.createDataFrame(second), 1, "query-a").rows_written == 5
    # An older batch id than the recorded one is a replay too (Delta's txnVersion rule).
    assert sink.write_batch(spark.createDataFrame(first), 0, "query-a").replay_skipped

    assert committed_version(str(tmp_path / "t"), "query-a") == 1
    assert committed_version(str(tmp_path / "t"), "query-b") is None
    assert data_commits(tmp_path / "t") == 2
    assert_df_equality(
        read_table(spark, tmp_path / "t"), expected_rows(spark, concat(first, second)), ignore_nullable=True
    )


def test_another_query_id_is_another_transaction(spark, tmp_path: Path) -> None:
    sink = DeltaSink(spark, DeltaSinkOptions(table=str(tmp_path / "t")))
    sink.write_batch(spark.createDataFrame(kafka_records("a", 0, range(3))), 4, "query-a")

    outcome = sink.write_batch(spark.createDataFrame(kafka_records("b", 0, range(3))), 0, "query-b")

    assert not outcome.replay_skipped
    assert committed_version(str(tmp_path / "t"), "query-a") == 4
    assert committed_version(str(tmp_path / "t"), "query-b") == 0


@pytest.mark.parametrize("trigger", [{"availableNow": True}, {"processingTime": "200 milliseconds"}])
def test_foreach_batch_commits_with_the_query_id(spark, tmp_path: Path, trigger: dict[str, object]) -> None:
    source = tmp_path / "source"
    source.mkdir()
    for part in range(3):
        pq.write_table(kafka_records("orders", part, range(4)), source / f"part-{part}.parquet")
    sink = DeltaSink(spark, DeltaSinkOptions(table=str(tmp_path / "t")))
    stream = spark.readStream.schema(spark.createDataFrame(kafka_records("x", 0, range(1))).schema)
    query = (
        stream.option("maxFilesPerTrigger", 1)
        .parquet(str(source))
        .writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(**trigger)
        .start()
    )
    try:
        query.processAllAvailable()
    finally:
        query.stop()

    # One file per micro-batch: batches 0, 1, 2 (a processing-time query may add empty ones, which commit nothing).
    assert committed_version(str(tmp_path / "t"), query.id) == 2
    all_records = concat(*(kafka_records("orders", part, range(4)) for part in range(3)))
    assert_df_equality(read_table(spark, tmp_path / "t"), expected_rows(spark, all_records), ignore_nullable=True)


def test_merge_protects_batch_reruns(spark, tmp_path: Path) -> None:
    sink = DeltaSink(spark, DeltaSinkOptions(table=str(tmp_path / "t")))
    records = concat(kafka_records("orders", 0, range(20)), kafka_records("orders", 1, range(5)))
    rerun = concat(kafka_records("orders", 0, range(10, 30)), kafka_records("orders", 1, range(5)))

    with records_stay_off_the_driver():
        assert sink.write_rerun(spark.createDataFrame(records)).rows_written == 25
        assert sink.write_rerun(spark.createDataFrame(records)).rows_written == 0
        assert sink.write_rerun(spark.createDataFrame(rerun)).rows_written == 10

    expected = concat(kafka_records("orders", 0, range(30)), kafka_records("orders", 1, range(5)))
    assert_df_equality(read_table(spark, tmp_path / "t"), expected_rows(spark, expected), ignore_nullable=True)


def test_merge_skips_what_a_streaming_batch_wrote(spark, tmp_path: Path) -> None:
    sink = DeltaSink(spark, DeltaSinkOptions(table=str(tmp_path / "t")))
    sink.write_batch(spark.createDataFrame(kafka_records("orders", 0, range(10))), 0, "query-a")

    with records_stay_off_the_driver():
        assert sink.write_rerun(spark.createDataFrame(kafka_records("orders", 0, range(5, 15)))).rows_written == 5

    assert read_table(spark, tmp_path / "t").count() == 15


def test_a_rerun_reads_the_keys_of_a_partitioned_table_from_its_directories(spark, tmp_path: Path) -> None:
    """`topic` and `date` are only in the files' directories: the keys read for the
    anti-join take them from there (only files whose statistics may hold the rerun's
    offsets are read: those of payments-2 are not)."""
    options = DeltaSinkOptions(table=str(tmp_path / "t"), partition_by_topic=True, partition_by_date=True)
    sink = DeltaSink(spark, options)
    first = concat(kafka_records("orders", 0, range(50, 62)), kafka_records("payments", 2, range(3)))
    sink.write_batch(spark.createDataFrame(first), 0, "query-a")

    rerun = concat(kafka_records("orders", 0, range(55, 70)), kafka_records("orders", 1, range(2)))
    with records_stay_off_the_driver():
        assert sink.write_rerun(spark.createDataFrame(rerun)).rows_written == 10

    expected = concat(
        kafka_records("orders", 0, range(50, 70)),
        kafka_records("orders", 1, range(2)),
        kafka_records("payments", 2, range(3)),
    )
    stored = read_table(spark, tmp_path / "t").drop("date")
    assert_df_equality(stored, expected_rows(spark, expected), ignore_nullable=True)


def test_a_rerun_on_a_table_with_deletion_vectors_reads_its_keys_through_delta_rs(spark, tmp_path: Path) -> None:
    """Spark's plain Parquet reader would miss deletion vectors: the keys come from delta-rs."""
    from deltalake.table import TableFeatures
    from loglake.spark.lake import plain_parquet_refusal

    sink = DeltaSink(spark, DeltaSinkOptions(table=str(tmp_path / "t")))
    sink.write_batch(spark.createDataFrame(kafka_records("orders", 0, range(10))), 0, "query-a")
    DeltaTable(str(tmp_path / "t")).alter.add_feature(
        TableFeatures.DeletionVectors, allow_protocol_versions_increase=True
    )
    assert plain_parquet_refusal(DeltaTable(str(tmp_path / "t"))) is not None

    with records_stay_off_the_driver():
        assert sink.write_rerun(spark.createDataFrame(kafka_records("orders", 0, range(5, 15)))).rows_written == 5
    stored = QueryBuilder().register("t", DeltaTable(str(tmp_path / "t"))).execute('SELECT "offset" FROM t').read_all()
    assert sorted(pa.table(stored)["offset"].to_pylist()) == list(range(15))


def test_a_rerun_overtaken_by_a_commit_of_the_same_offsets_plans_again(spark, tmp_path: Path, monkeypatch) -> None:
    """Another writer commits some of the rerun's offsets after the rerun read the table's
    keys, before its commit: the rerun throws its files away and plans again from the new
    version, so no offset is stored twice."""
    from loglake.spark import frame_writer

    sink = DeltaSink(spark, DeltaSinkOptions(table=str(tmp_path / "t")))
    sink.write_batch(spark.createDataFrame(kafka_records("orders", 0, range(5))), 0, "query-a")
    rival = DeltaSink(spark, DeltaSinkOptions(table=str(tmp_path / "t")))
    write_files = frame_writer.write_files
    calls = []

    def write_then_rival_commits(frame, table, layout):
        calls.append(table)
        written = write_files(frame, table, layout)
        if len(calls) == 1:
            rival.write_batch(spark.createDataFrame(kafka_records("orders", 0, range(5, 12))), 0, "query-b")
        return written

    monkeypatch.setattr(frame_writer, "write_files", write_then_rival_commits)
    assert sink.write_rerun(spark.createDataFrame(kafka_records("orders", 0, range(20)))).rows_written == 8

    assert len(calls) == 3  # the rerun's first plan, the rival's write, the rerun's second plan
    assert_df_equality(
        read_table(spark, tmp_path / "t"),
        expected_rows(spark, kafka_records("orders", 0, range(20))),
        ignore_nullable=True,
    )
    referenced = set(pa.table(DeltaTable(str(tmp_path / "t")).get_add_actions(flatten=True))["path"].to_pylist())
    assert {p.name for p in (tmp_path / "t").glob("*.parquet")} == referenced  # the first plan's files are gone


def test_partitioned_by_topic_and_utc_date(spark, tmp_path: Path) -> None:
    # BASE_TIMESTAMP is 23:59:00 UTC: offsets from 60 on fall on the next day.
    spark.conf.set("spark.sql.session.timeZone", "Asia/Tokyo")  # the date must still be the UTC one
    try:
        options = DeltaSinkOptions(table=str(tmp_path / "t"), partition_by_topic=True, partition_by_date=True)
        records = concat(kafka_records("orders", 0, range(55, 65)), kafka_records("payments", 2, range(3)))
        DeltaSink(spark, options).write_batch(spark.createDataFrame(records), 0, "query-a")
    finally:
        spark.conf.set("spark.sql.session.timeZone", "UTC")

    table = DeltaTable(str(tmp_path / "t"))
    assert table.metadata().partition_columns == ["topic", "date"]
    day = BASE_TIMESTAMP.date()
    next_day = day + dt.timedelta(days=1)
    assert sorted((p["topic"], p["date"]) for p in table.partitions()) == [
        ("orders", str(day)),
        ("orders", str(next_day)),
        ("payments", str(day)),
    ]
    stored = read_table(spark, tmp_path / "t")
    dates = {(row.offset, row.date) for row in stored.where(F.col("topic") == "orders").collect()}
    assert dates == {(i, day if i < 60 else next_day) for i in range(55, 65)}


def test_compaction_keeps_rows_and_transactions(spark, tmp_path: Path) -> None:
    sink = DeltaSink(spark, DeltaSinkOptions(table=str(tmp_path / "t"), compact_every=4))
    batches = [kafka_records("orders", 0, range(i * 10, i * 10 + 10)) for i in range(4)]
    outcomes = [sink.write_batch(spark.createDataFrame(batch), i, "query-a") for i, batch in enumerate(batches)]

    assert [outcome.compacted for outcome in outcomes] == [False, False, False, True]
    table = DeltaTable(str(tmp_path / "t"))
    assert len(table.file_uris()) == 1
    assert table.transaction_version("query-a") == 3
    assert_df_equality(read_table(spark, tmp_path / "t"), expected_rows(spark, concat(*batches)), ignore_nullable=True)


def test_json_values_become_columns(spark, tmp_path: Path) -> None:
    options = DeltaSinkOptions(table=str(tmp_path / "t"), value_format="json", value_schema="n BIGINT, word STRING")
    DeltaSink(spark, options).write_batch(spark.createDataFrame(kafka_records("orders", 0, range(3))), 0, "query-a")

    stored = read_table(spark, tmp_path / "t")
    assert stored.columns == ["topic", "partition", "offset", "timestamp", "key", "n", "word", "headers"]
    assert [(row.offset, row.n, row.word) for row in stored.collect()] == [(0, 0, "w0"), (1, 1, "w1"), (2, 2, "w2")]


def test_value_schema_may_not_shadow_table_columns(spark, tmp_path: Path) -> None:
    options = DeltaSinkOptions(table=str(tmp_path / "t"), value_format="json", value_schema="offset BIGINT, n INT")
    with pytest.raises(ValueError, match="offset"):
        DeltaSink(spark, options).write_batch(spark.createDataFrame(kafka_records("a", 0, range(1))), 0, "q")
    not_fields = DeltaSinkOptions(table=str(tmp_path / "t"), value_format="json", value_schema="INT")
    with pytest.raises(ValueError, match="list of fields"):
        DeltaSink(spark, not_fields).write_batch(spark.createDataFrame(kafka_records("a", 0, range(1))), 0, "q")


def test_batches_without_headers_get_a_null_headers_column(spark, tmp_path: Path) -> None:
    sink = DeltaSink(spark, DeltaSinkOptions(table=str(tmp_path / "t")))
    without_headers = kafka_records("orders", 0, range(2)).drop_columns(["headers"])
    sink.write_batch(spark.createDataFrame(without_headers), 0, "query-a")
    sink.write_batch(spark.createDataFrame(kafka_records("orders", 0, range(2, 4))), 1, "query-a")

    stored = read_table(spark, tmp_path / "t").collect()
    assert [row.headers for row in stored[:2]] == [None, None]
    assert [[(h.key, h.value) for h in row.headers] for row in stored[2:]] == [[("h", b"2")], [("h", b"3")]]


def test_options_are_checked() -> None:
    with pytest.raises(ValueError, match="json needs one"):
        DeltaSinkOptions(table="t", value_format="json")
    with pytest.raises(ValueError, match="json needs one"):
        DeltaSinkOptions(table="t", value_schema="n INT")
    with pytest.raises(ValueError, match="compact_every"):
        DeltaSinkOptions(table="t", compact_every=-1)


def test_without_delta_jars_the_writer_is_deltalake(spark, tmp_path: Path) -> None:
    assert not delta_spark_available(spark)
    assert DeltaSink(spark, DeltaSinkOptions(table=str(tmp_path / "t"))).engine_name == "deltalake"


def test_without_delta_jars_the_reason_is_the_classpath_and_delta_spark_is_refused(spark, tmp_path: Path) -> None:
    # The delta-spark Python package is installed here; the jars are what is missing.
    assert (
        delta_spark_missing(spark) == "Delta's jars are not on Spark's classpath (io.delta.tables.DeltaTable not found)"
    )
    with pytest.raises(ValueError, match="engine delta-spark: Delta's jars are not on Spark's classpath"):
        DeltaSink(spark, DeltaSinkOptions(table=str(tmp_path / "t"), engine="delta-spark"))


def test_the_tasks_write_the_files_and_the_driver_commits_them_once(spark, tmp_path: Path) -> None:
    """Each Spark task writes its own rows (one file per input partition, in a partition
    directory per topic); the commit holds every file and nothing outside the table."""
    sink = DeltaSink(spark, DeltaSinkOptions(table=str(tmp_path / "t"), partition_by_topic=True))
    records = concat(kafka_records("orders", 0, range(30)), kafka_records("payments", 1, range(30)))
    batch = spark.createDataFrame(records).repartition(3, "offset")
    assert sink.write_batch(batch, 0, "query-a").rows_written == 60

    actions = pa.table(DeltaTable(str(tmp_path / "t")).get_add_actions(flatten=True)).to_pylist()
    # Three tasks, each with rows of both topics: two files each.
    assert len(actions) == 6
    assert {a["path"].split("/")[0] for a in actions} == {"topic=orders", "topic=payments"}
    assert sum(a["num_records"] for a in actions) == 60
    on_disk = {str(p.relative_to(tmp_path / "t")) for p in (tmp_path / "t").glob("topic=*/*.parquet")}
    assert on_disk == {a["path"] for a in actions}
    assert_df_equality(read_table(spark, tmp_path / "t"), expected_rows(spark, records), ignore_nullable=True)


def test_a_table_of_other_columns_is_refused_before_anything_is_written(spark, tmp_path: Path) -> None:
    DeltaSink(spark, DeltaSinkOptions(table=str(tmp_path / "t"))).write_batch(
        spark.createDataFrame(kafka_records("orders", 0, range(3))), 0, "query-a"
    )
    files = set((tmp_path / "t").glob("*.parquet"))
    partitioned = DeltaSink(spark, DeltaSinkOptions(table=str(tmp_path / "t"), partition_by_topic=True))
    with pytest.raises(ValueError, match=r"partitioned by \[\], not \['topic'\]"):
        partitioned.write_batch(spark.createDataFrame(kafka_records("orders", 0, range(3, 6))), 1, "query-a")
    assert set((tmp_path / "t").glob("**/*.parquet")) == files


def test_a_streaming_query_writes_through_delta_sink_as_its_foreach_batch(spark, tmp_path: Path) -> None:
    """DeltaSink as the foreachBatch of a real streaming query (a file source of two
    micro-batches): each micro-batch's executor-written files committed with the query's id."""
    records = kafka_records("orders", 0, range(40))
    (tmp_path / "in").mkdir()
    pq.write_table(records.slice(0, 20), tmp_path / "in" / "0.parquet")
    pq.write_table(records.slice(20), tmp_path / "in" / "1.parquet")
    source = spark.readStream.schema(spark.createDataFrame(records).schema).option("maxFilesPerTrigger", 1)
    query = (
        source.parquet(str(tmp_path / "in"))
        .writeStream.foreachBatch(DeltaSink(spark, DeltaSinkOptions(table=str(tmp_path / "t"))))
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()

    assert committed_version(str(tmp_path / "t"), query.id) == 1
    assert data_commits(tmp_path / "t") == 2
    assert_df_equality(read_table(spark, tmp_path / "t"), expected_rows(spark, records), ignore_nullable=True)


@pytest.mark.parametrize(
    "options",
    [
        {"partition_by_topic": True, "partition_by_date": True},
        {"value_format": "json", "value_schema": "id BIGINT, name STRING"},
    ],
)
def test_a_table_written_from_the_driver_by_earlier_versions_is_appended_to(spark, tmp_path: Path, options) -> None:
    """Tables the sink wrote before the executors did (`write_deltalake` of the micro-batch
    collected as Arrow) have the columns the executors' files get: appended to, not refused."""
    sink_options = DeltaSinkOptions(table=str(tmp_path / "t"), **options)
    earlier = table_frame(spark.createDataFrame(kafka_records("orders", 0, range(5))), sink_options)
    data = earlier.toArrow()
    write_deltalake(
        sink_options.table, data.cast(nullable_schema(data.schema)), partition_by=sink_options.partition_columns or None
    )

    later = spark.createDataFrame(kafka_records("orders", 0, range(5, 10)))
    assert DeltaSink(spark, sink_options).write_batch(later, 0, "query-a").rows_written == 5
    assert sorted(DeltaTable(sink_options.table).to_pyarrow_table()["offset"].to_pylist()) == list(range(10))


def test_a_table_named_by_a_uri_is_written_through_its_filesystem(spark, tmp_path: Path) -> None:
    """A `file://` table: the tasks write through pyarrow's filesystem of the URI (as for
    `s3://`, `gs://`, `abfss://`), delta-rs commits at the same location."""
    sink = DeltaSink(spark, DeltaSinkOptions(table=f"file://{tmp_path}/t", partition_by_topic=True))
    assert sink.write_batch(spark.createDataFrame(kafka_records("orders", 0, range(7))), 0, "query-a").rows_written == 7
    assert sorted(DeltaTable(str(tmp_path / "t")).to_pyarrow_table()["offset"].to_pylist()) == list(range(7))
    assert len(list((tmp_path / "t" / "topic=orders").glob("*.parquet"))) == 2  # local[2]: two tasks
