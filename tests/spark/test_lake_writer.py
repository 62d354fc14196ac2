"""The lake writer (`loglake.spark.lake_writer`, `jobs/delta_sink.py` on it) against a live broker:
exactly once by (topic, partition, offset) across reruns of new jobs, the takeover of a table
written by the query-id `DeltaSink`, two writers on one table, aborted transactions left out,
JSON values and partitions, and bad input refused before anything is written."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pyarrow as pa
import pytest
from clients.client_helpers import create_topic
from confluent_kafka import Producer
from deltalake import DeltaTable, write_deltalake
from loglake.spark.delta_sink import DeltaSink, DeltaSinkOptions
from loglake.spark.lake_writer import (
    SINK_APP_PREFIX,
    LakeConflict,
    LakeTable,
    LakeTableError,
    LakeWriter,
    app_id,
    decode_json_values,
    plan_from_log,
)
from loglake.spark.offset_ranges import DataLossError, connect
from loglake.spark.options import OptionError
from source_helpers import delete_records

from jobs.delta_sink import parse_args, read_options, run, sink_round, table_layout

PARTITIONS = 3


def produce_numbered(bootstrap: str, topic: str, first: int, count: int) -> dict[tuple[int, int], tuple[bytes, bytes]]:
    """Records k<n>/v<n> round-robin over the partitions; (partition, offset) -> (key, value) acknowledged."""
    acked: dict[tuple[int, int], tuple[bytes, bytes]] = {}
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})

    def report(err, msg) -> None:
        assert err is None, err
        acked[(msg.partition(), msg.offset())] = (msg.key(), msg.value())

    for n in range(first, first + count):
        p.produce(topic, key=b"k%d" % n, value=b"v%d" % n, partition=n % PARTITIONS, on_delivery=report)
    assert p.flush(30) == 0
    return acked


def stored(table: Path) -> list[tuple[int, int, bytes, bytes]]:
    rows = DeltaTable(str(table)).to_pyarrow_table(columns=["partition", "offset", "key", "value"])
    return sorted(zip(*(rows[c].to_pylist() for c in ("partition", "offset", "key", "value"))))


def as_rows(acked: dict[tuple[int, int], tuple[bytes, bytes]]) -> list[tuple[int, int, bytes, bytes]]:
    return sorted((p, o, k, v) for (p, o), (k, v) in acked.items())


def sink_args(broker, topic: str, table: Path, *extra: str) -> list[str]:
    return ["--bootstrap-servers", broker.bootstrap, "--topics", topic, "--table", str(table), *extra]


def table_files(dt: DeltaTable) -> set[str]:
    return set(pa.table(dt.get_add_actions(flatten=True))["path"].to_pylist())


def parquet_files(table: Path) -> set[str]:
    return {str(p.relative_to(table)) for p in table.rglob("*.parquet")}


def test_new_jobs_over_a_sunk_range_write_nothing_twice(loglake_spark, broker, topic, tmp_path: Path) -> None:
    create_topic(broker.bootstrap, topic, PARTITIONS)
    acked = produce_numbered(broker.bootstrap, topic, 0, 300)
    table = tmp_path / "table"
    run(loglake_spark, parse_args(sink_args(broker, topic, table, "--max-offsets-per-trigger", "100")))
    assert stored(table) == as_rows(acked)
    first_version = DeltaTable(str(table)).version()

    # A new job (nothing but the table in common) over the same offsets, then over more.
    run(loglake_spark, parse_args(sink_args(broker, topic, table, "--batch")))
    assert DeltaTable(str(table)).version() == first_version  # nothing to commit
    acked |= produce_numbered(broker.bootstrap, topic, 300, 90)
    run(loglake_spark, parse_args(sink_args(broker, topic, table, "--starting-offsets", "latest")))
    assert stored(table) == as_rows(acked)
    dt = DeltaTable(str(table))
    ends = {p: max(o for q, o in acked if q == p) + 1 for p in range(PARTITIONS)}
    assert {p: dt.transaction_version(app_id(SINK_APP_PREFIX, topic, p)) for p in range(PARTITIONS)} == ends
    # Every file in the directory is in the table: no attempt left any behind.
    assert parquet_files(table) == table_files(dt)


def test_a_table_of_the_query_id_sink_is_taken_over_once(
    loglake_spark, broker, topic, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    create_topic(broker.bootstrap, topic, PARTITIONS)
    acked = produce_numbered(broker.bootstrap, topic, 0, 120)
    table = tmp_path / "table"
    # The query-id sink's table: a streaming batch (app id = a query id) of part of the topic.
    ending = {topic: {str(p): 20 for p in range(PARTITIONS)}}
    old = (
        loglake_spark.read.format("loglake")
        .option("kafka.bootstrap.servers", broker.bootstrap)
        .option("subscribe", topic)
        .option("endingOffsets", json.dumps(ending))
        .option("includeHeaders", "true")
        .load()
    )
    DeltaSink(loglake_spark, DeltaSinkOptions(str(table))).write_batch(old, 0, "some-query-id")
    assert len(stored(table)) == 60

    with caplog.at_level(logging.WARNING, logger="loglake.spark.lake_writer"):
        run(loglake_spark, parse_args(sink_args(broker, topic, table)))
    assert stored(table) == as_rows(acked)
    taken_over = [r.getMessage() for r in caplog.records if "taken over" in r.getMessage()]
    assert len(taken_over) == PARTITIONS and all("the next offset is 20" in m for m in taken_over)

    caplog.clear()
    acked |= produce_numbered(broker.bootstrap, topic, 120, 30)
    with caplog.at_level(logging.WARNING, logger="loglake.spark.lake_writer"):
        run(loglake_spark, parse_args(sink_args(broker, topic, table)))
    assert stored(table) == as_rows(acked)
    assert not [r for r in caplog.records if "taken over" in r.getMessage()]  # once


def test_two_writers_on_one_table_one_commit_wins_the_other_plans_again(
    loglake_spark, broker, topic, tmp_path: Path
) -> None:
    create_topic(broker.bootstrap, topic, PARTITIONS)
    acked = produce_numbered(broker.bootstrap, topic, 0, 150)
    table = tmp_path / "table"
    args = parse_args(sink_args(broker, topic, table))
    read = read_options(args)
    lake = LakeTable(str(table), table_layout(args))
    first, second = LakeWriter(loglake_spark, lake, read), LakeWriter(loglake_spark, lake, read)

    # Both plan against no table: the first creates it; the second's plan is stale.
    with connect(read) as client:
        stale = plan_from_log(client, lake, read, lake.snapshot())
    sink_round(first, read, None, None)
    with pytest.raises(LakeConflict):
        first.write_round(stale)

    # Both plan against the same version; the rival commits in between, the loser plans again.
    acked |= produce_numbered(broker.bootstrap, topic, 150, 60)
    rival_done = []

    def plan_with_a_rival(snapshot):
        with connect(read) as client:
            planned = plan_from_log(client, lake, read, snapshot)
        if not rival_done:
            rival_done.append(sink_round(first, read, None, None))
        return planned

    outcome = second.run_round(plan_with_a_rival)
    assert outcome.attempts == 2 and outcome.rows == 0 and rival_done[0].rows == 60
    assert stored(table) == as_rows(acked)
    assert parquet_files(table) == table_files(DeltaTable(str(table)))


def test_aborted_transactions_are_left_out_and_json_values_become_columns(
    loglake_spark, broker, topic, tmp_path: Path
) -> None:
    create_topic(broker.bootstrap, topic, 1)
    txn = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": topic, "linger.ms": 5})
    txn.init_transactions(30)
    for n, commit in [(0, True), (1, False), (2, True)]:
        txn.begin_transaction()
        for i in range(5):
            value = {"id": n * 10 + i, "user": f"u{i}", "amount": 1.5 * i}
            txn.produce(topic, json.dumps(value).encode(), key=b"k", partition=0)
        txn.produce(topic, b"not json", key=b"bad", partition=0)
        txn.flush(30)
        txn.commit_transaction(30) if commit else txn.abort_transaction(30)
    table = tmp_path / "table"
    schema = "id BIGINT, user STRING, amount DOUBLE"
    run(
        loglake_spark,
        parse_args(
            sink_args(broker, topic, table, "--value-format", "json", "--value-schema", schema)
            + ["--partition-by-topic", "--partition-by-date"]
        ),
    )
    dt = DeltaTable(str(table))
    rows = dt.to_pyarrow_table(columns=["id", "user", "amount", "key"]).to_pylist()
    assert sorted(r["id"] for r in rows if r["key"] == b"k") == [0, 1, 2, 3, 4, 20, 21, 22, 23, 24]
    assert [r for r in rows if r["key"] == b"bad"] == [{"id": None, "user": None, "amount": None, "key": b"bad"}] * 2
    assert dt.metadata().partition_columns == ["topic", "date"]
    assert all(f.startswith(f"topic={topic}/date=") for f in table_files(dt))


def test_json_values_parse_as_from_json_does() -> None:
    fields = pa.schema([pa.field("id", pa.int64()), pa.field("name", pa.string())])
    values = pa.array([b'{"id": 1, "name": "a"}', b'{"id":\n 2}', None, b"[1]", b'{"id": "x"}', b"{"], pa.binary())
    decoded = decode_json_values(values, fields).to_pylist()
    assert decoded == [{"id": 1, "name": "a"}, {"id": 2, "name": None}, None, None, None, None]


def test_bad_input_is_refused_before_anything_is_written(loglake_spark, broker, topic, tmp_path: Path) -> None:
    create_topic(broker.bootstrap, topic, PARTITIONS)
    produce_numbered(broker.bootstrap, topic, 0, 30)

    with pytest.raises(OptionError, match="no-such-topic"):
        run(loglake_spark, parse_args(sink_args(broker, "no-such-topic", tmp_path / "t0")))
    assert not (tmp_path / "t0").exists()

    other_columns = tmp_path / "t1"
    write_deltalake(str(other_columns), pa.table({"topic": ["x"], "offset": [1]}))
    with pytest.raises(LakeTableError, match="columns are not those written here"):
        run(loglake_spark, parse_args(sink_args(broker, topic, other_columns)))

    other_partitions = tmp_path / "t2"
    run(loglake_spark, parse_args(sink_args(broker, topic, other_partitions)))
    with pytest.raises(LakeTableError, match=r"partitioned by \[\], not \['topic'\]"):
        run(loglake_spark, parse_args(sink_args(broker, topic, other_partitions, "--partition-by-topic")))

    constrained = tmp_path / "t3"
    run(loglake_spark, parse_args(sink_args(broker, topic, constrained)))
    DeltaTable(str(constrained)).alter.add_constraint({"positive": '"offset" >= 0'})
    with pytest.raises(LakeTableError, match="CHECK constraints"):
        run(loglake_spark, parse_args(sink_args(broker, topic, constrained)))
    for table in (other_columns, other_partitions, constrained):
        assert parquet_files(table) == table_files(DeltaTable(str(table)))


def test_records_deleted_before_they_were_sunk(loglake_spark, broker, topic, tmp_path: Path) -> None:
    create_topic(broker.bootstrap, topic, PARTITIONS)
    acked = produce_numbered(broker.bootstrap, topic, 0, 30)
    table = tmp_path / "table"
    run(loglake_spark, parse_args(sink_args(broker, topic, table)))
    acked |= produce_numbered(broker.bootstrap, topic, 30, 30)
    delete_records(broker, topic, 1, 17)  # the table has offsets 0..9 of partition 1
    version = DeltaTable(str(table)).version()
    with pytest.raises(DataLossError, match=rf"offsets 10\.\.16 of {topic}-1 were deleted"):
        run(loglake_spark, parse_args(sink_args(broker, topic, table)))
    assert DeltaTable(str(table)).version() == version  # nothing written

    run(loglake_spark, parse_args(sink_args(broker, topic, table, "--fail-on-data-loss", "false")))
    assert stored(table) == as_rows({k: v for k, v in acked.items() if not (k[0] == 1 and 10 <= k[1] < 17)})
    assert DeltaTable(str(table)).transaction_version(app_id(SINK_APP_PREFIX, topic, 1)) == 20


def test_group_offsets_and_compaction(loglake_spark, broker, topic, tmp_path: Path) -> None:
    from loglake.spark.group_offsets import committed_offsets
    from loglake.spark.protocol_client import ProtocolClient, TopicPartition

    create_topic(broker.bootstrap, topic, PARTITIONS)
    acked = produce_numbered(broker.bootstrap, topic, 0, 150)
    table = tmp_path / "table"
    group = f"{topic}-group"
    argv = sink_args(broker, topic, table, "--group", group, "--max-offsets-per-trigger", "60", "--compact-every", "2")
    run(loglake_spark, parse_args(argv))
    assert stored(table) == as_rows(acked)
    with ProtocolClient(broker.bootstrap) as client:
        offsets = committed_offsets(client, group, [TopicPartition(topic, p) for p in range(PARTITIONS)])
    assert offsets == {TopicPartition(topic, p): 50 for p in range(PARTITIONS)}
    operations = [entry["operation"] for entry in DeltaTable(str(table)).history()]
    assert "OPTIMIZE" in operations
    dt = DeltaTable(str(table))
    assert {p: dt.transaction_version(app_id(SINK_APP_PREFIX, topic, p)) for p in range(PARTITIONS)} == dict.fromkeys(
        range(PARTITIONS), 50
    )
