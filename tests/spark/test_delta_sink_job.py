"""The command line of `jobs.delta_sink` and the loglake source options it asks for."""

from __future__ import annotations

import pytest

from jobs.delta_sink import Trigger, loglake_source_options, parse_args, sink_options

TOPIC_ARGS = ["--bootstrap-servers", "b:9092", "--table", "/t", "--checkpoint", "/c"]


def test_triggers() -> None:
    assert parse_args([*TOPIC_ARGS, "--topics", "a"]).trigger.spark_kwargs() == {"availableNow": True}
    assert Trigger.parse("processing-time=10 seconds").spark_kwargs() == {"processingTime": "10 seconds"}
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


def test_sink_options_from_the_command_line() -> None:
    args = parse_args(
        [*TOPIC_ARGS, "--topics", "a", "--value-format", "json", "--value-schema", "n INT", "--partition-by-topic"]
        + ["--partition-by-date", "--compact-every", "10"]
    )

    options = sink_options(args)
    assert (options.value_schema, options.partition_columns, options.compact_every) == ("n INT", ["topic", "date"], 10)


@pytest.mark.parametrize(
    "argv",
    [
        ["--table", "/t", "--checkpoint", "/c", "--topics", "a"],  # no bootstrap servers
        ["--bootstrap-servers", "b:9092", "--table", "/t", "--checkpoint", "/c"],  # no topics
        ["--bootstrap-servers", "b:9092", "--table", "/t", "--topics", "a"],  # streaming without a checkpoint
        [*TOPIC_ARGS, "--topics", "a", "--pattern", "a.*"],
    ],
)
def test_incomplete_command_lines_are_refused(argv: list[str]) -> None:
    with pytest.raises(SystemExit):
        parse_args(argv)
