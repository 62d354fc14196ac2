"""`jobs.consume_group`: a run reads from the group's offsets to the high watermark, writes,
then commits; the plan it leaves in the group before writing lets a rerun after a crash finish
that same run. In-process runs here; the crash tests (child processes) are in
test_consume_group_crashes.py."""

from __future__ import annotations

import json

import pytest
from test_group_commits import commit_with_confluent, committed

from clients.client_helpers import create_topic, read_all, unique_name
from jobs.consume_group import execute, load_function, make_target, parse_args, read_options, run
from source_helpers import offsets_of, produce, records_stay_off_the_driver

BASE = ["--bootstrap-servers", "b:9092", "--group", "g", "--topics", "t"]


def test_parquet_run_from_the_group_offsets_then_only_new_records(loglake_spark, broker, topic, tmp_path) -> None:
    group = unique_name("etl")
    create_topic(broker.bootstrap, topic, partitions=2)
    produce(broker, topic, [{"value": b"v%d" % i, "partition": i % 2} for i in range(20)])
    commit_with_confluent(broker, group, topic, {0: 5})  # partition 1: from --starting-offsets
    out = tmp_path / "out"
    argv = ["--bootstrap-servers", broker.bootstrap, "--group", group, "--topics", topic, "--parquet", str(out)]
    select = ["--select", "partition, offset, upper(cast(value AS string)) AS v", "--where", "offset % 2 = 0"]

    made = run(loglake_spark, parse_args(argv + select))
    assert made is not None and made.run_id == 1
    rows = loglake_spark.read.parquet(str(out))
    assert offsets_of(rows) == [(0, o) for o in (6, 8)] + [(1, o) for o in range(0, 10, 2)]
    assert {r.v for r in rows.collect()} == {"V%d" % (2 * o + p) for p, o in offsets_of(rows)}
    assert committed(broker, group, topic, 2) == {0: 10, 1: 10}

    produce(broker, topic, [{"value": b"w", "partition": 1} for _ in range(3)])
    assert run(loglake_spark, parse_args(argv + select)).run_id == 2
    assert offsets_of(loglake_spark.read.parquet(str(out))) == offsets_of(rows) + [(1, 10), (1, 12)]
    assert committed(broker, group, topic, 2) == {0: 10, 1: 13}
    assert run(loglake_spark, parse_args(argv + select)) is None  # nothing new


def test_a_function_transform_into_delta(loglake_spark, broker, topic, tmp_path, monkeypatch) -> None:
    from deltalake import DeltaTable

    (tmp_path / "my_transforms.py").write_text(
        "def keyed(df):\n    return df.selectExpr('partition', 'offset', 'key', 'length(value) AS size')\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    group = unique_name("delta-etl")
    create_topic(broker.bootstrap, topic, partitions=3)
    produce(broker, topic, [{"key": b"k%d" % i, "value": b"x" * i, "partition": i % 3} for i in range(30)])
    table = tmp_path / "table"
    argv = ["--bootstrap-servers", broker.bootstrap, "--group", group, "--topics", topic]
    run(loglake_spark, parse_args([*argv, "--function", "my_transforms:keyed", "--delta", str(table)]))

    stored = DeltaTable(str(table)).to_pyarrow_table().to_pylist()
    assert sorted((r["key"], r["size"]) for r in stored) == sorted((b"k%d" % i, i) for i in range(30))
    assert committed(broker, group, topic, 3) == {0: 10, 1: 10, 2: 10}
    assert DeltaTable(str(table)).transaction_version(f"loglake-consume-group:{group}") == 1


def test_command_line_errors(tmp_path, monkeypatch, capsys) -> None:
    with pytest.raises(SystemExit):
        parse_args([*BASE])  # no target
    with pytest.raises(SystemExit):
        parse_args([*BASE, "--parquet", "p", "--delta", "d"])
    with pytest.raises(SystemExit):
        parse_args([*BASE, "--parquet", "p", "--function", "no_colon"])
    assert "module:function" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        parse_args([*BASE, "--parquet", "p", "--function", "no_such_module_here:f"])
    assert "cannot import" in capsys.readouterr().err
    (tmp_path / "few_transforms.py").write_text("x = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(SystemExit):
        parse_args([*BASE, "--parquet", "p", "--function", "few_transforms:x"])
    with pytest.raises(SystemExit):
        parse_args([*BASE, "--parquet", "p", "--function", "few_transforms:x", "--where", "true"])
    assert load_function("json:dumps") is json.dumps


def test_a_topic_target_that_does_not_exist_fails_before_writing(loglake_spark, broker, topic, tmp_path) -> None:
    from loglake.spark.options import OptionError

    group = unique_name("to-nowhere")
    create_topic(broker.bootstrap, topic, partitions=1)
    produce(broker, topic, [{"value": b"v"}])
    argv = ["--bootstrap-servers", broker.bootstrap, "--group", group, "--topics", topic, "--topic", "no-such-topic"]
    with pytest.raises(OptionError, match="no-such-topic"):
        run(loglake_spark, parse_args(argv))
    assert committed(broker, group, topic, 1) == {0: -1}  # nothing planned, nothing committed


def test_a_topic_target_is_written_by_the_tasks_once_per_run(loglake_spark, broker, topic) -> None:
    """Each task produces its share of the run in its own transaction and the driver only
    commits them: no record reaches the driver. The run executed again (as a process
    resuming it after a crash between writing and committing would) writes nothing more,
    not even aborted copies: every task finds the run committed by its transactional id."""
    target, group = unique_name("cg-to-topic"), unique_name("cg-to-topic")
    create_topic(broker.bootstrap, topic, partitions=3)
    create_topic(broker.bootstrap, target, partitions=2)
    produce(broker, topic, [{"key": b"k%d" % i, "value": b"v%d" % i, "partition": i % 3} for i in range(60)])
    argv = ["--bootstrap-servers", broker.bootstrap, "--group", group, "--topics", topic]
    args = parse_args([*argv, "--select", "key, upper(cast(value AS string)) AS value", "--topic", target])

    with records_stay_off_the_driver():
        planned = run(loglake_spark, args)
    assert planned is not None and planned.target_tasks == loglake_spark.sparkContext.defaultParallelism
    expected = sorted((b"k%d" % i, b"V%d" % i) for i in range(60))
    assert sorted((k, v) for _, _, k, v in read_all(broker.bootstrap, target, partitions=2)) == expected
    assert committed(broker, group, topic, 3) == {0: 20, 1: 20, 2: 20}

    execute(loglake_spark, args, read_options(args), make_target(loglake_spark, args), planned)
    uncommitted = read_all(broker.bootstrap, target, partitions=2, isolation="read_uncommitted")
    assert sorted((k, v) for _, _, k, v in uncommitted) == expected
