"""The command line of `jobs.delta_sink` and the loglake source options it asks for."""

from __future__ import annotations

import pytest

from jobs.delta_sink import Trigger, loglake_source_options, parse_args, table_layout

TOPIC_ARGS = ["--bootstrap-servers", "b:9092", "--table", "/t", "--checkpoint", "/c"]


def test_triggers() -> None:
    assert parse_args([*TOPIC_ARGS, "--topics", "a"]).trigger.available_now
    assert Trigger.parse("processing-time=10 seconds") == Trigger(available_now=False, interval_s=10)
    assert Trigger.parse("processing-time=500ms").interval_s == 0.5
    assert Trigger.parse("processing-time=1 minute").interval_s == 60
    with pytest.raises(SystemExit):
        parse_args([*TOPIC_ARGS, "--topics", "a", "--trigger", "once"])


def test_streaming_source_options() -> None:
    args = parse_args([*TOPIC_ARGS, "--topics", "a,b", "--group", "g", "--max-offsets-per-trigger", "1000"])

    assert loglake_source_options(args) == {
        "kafka.bootstrap.servers": "b:9092",
        "subscribe": "a,b",
        "startingOffsets": "earliest",
        "includeHeaders": "true",
        "kafka.group.id": "g",
        "maxOffsetsPerTrigger": "1000",
    }


def test_batch_source_options() -> None:
    args = parse_args(["--bootstrap-servers", "b:9092", "--table", "/t", "--batch", "--pattern", "o.*"])

    assert loglake_source_options(args) == {
        "kafka.bootstrap.servers": "b:9092",
        "subscribePattern": "o.*",
        "startingOffsets": "earliest",
        "endingOffsets": "latest",
        "includeHeaders": "true",
    }


def test_table_layout_from_the_command_line() -> None:
    args = parse_args([*TOPIC_ARGS, "--topics", "a", "--partition-by-topic", "--partition-by-date", "--compact-every", "10"])

    layout = table_layout(args)
    assert layout.partition_by == ("topic", "date") and args.compact_every == 10
    assert layout.schema.names == ["topic", "partition", "offset", "timestamp", "key", "value", "headers", "date"]
    assert layout.data_schema.names == ["partition", "offset", "timestamp", "key", "value", "headers"]


@pytest.mark.parametrize(
    "argv",
    [
        ["--table", "/t", "--checkpoint", "/c", "--topics", "a"],  # no bootstrap servers
        ["--bootstrap-servers", "b:9092", "--table", "/t", "--checkpoint", "/c"],  # no topics
        [*TOPIC_ARGS, "--topics", "a", "--value-format", "json"],  # json without a schema
        [*TOPIC_ARGS, "--topics", "a", "--trigger", "processing-time=soon"],
        [*TOPIC_ARGS, "--topics", "a", "--pattern", "a.*"],
    ],
)
def test_incomplete_command_lines_are_refused(argv: list[str]) -> None:
    with pytest.raises(SystemExit):
        parse_args(argv)
