"""Topics into a Delta table, exactly once by (topic, partition, offset): `python -m jobs.delta_sink`
or `spark-submit jobs/delta_sink.py`.

The job runs the lake writer (`loglake.spark.lake_writer`) in rounds: each plans from the
table's own app transactions (one per topic partition, version = the next offset to write),
so whatever run, restart or rerun wrote a record, the table holds it once. Spark tasks fetch
and decode the offset ranges and write the Parquet files; the driver commits their add
actions with every partition's new end in one Delta commit.

`--trigger available-now` (the default) writes what the topics hold when it starts, in rounds
of at most `--max-offsets-per-trigger` records, then stops; `processing-time=<interval>` runs a
round per interval until stopped. `--batch` is one round up to `--ending-offsets`.

    python -m jobs.delta_sink --bootstrap-servers localhost:9092 --topics orders \\
        --table /data/orders --trigger available-now
"""

from __future__ import annotations

import argparse
import logging
import re
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyarrow as pa
from deltalake import DeltaTable
from loglake.spark import job_session
from loglake.spark.delta_arrow import nullable_schema
from loglake.spark.group_offsets import commit_offsets
from loglake.spark.job_cluster import add_cluster_arguments, cluster_access
from loglake.spark.kafka_columns import HEADERS_TYPE
from loglake.spark.lake_writer import (
    DATE_COLUMN,
    LAKE_WRITER_JAVA_OPTIONS,
    LakeTable,
    LakeWriter,
    RoundOutcome,
    TableLayout,
    plan_from_log,
)
from loglake.spark.offset_ranges import connect, discover_partitions, resolve_offsets
from loglake.spark.options import ReadOptions, parse_read_options
from loglake.spark.protocol_client import TopicPartition

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger("jobs.delta_sink")

# The table's columns (JSON-decoded value fields replace `value`).
KEY_COLUMNS = ("topic", "partition", "offset")
_UNITS_S = {
    "ms": 0.001,
    "millisecond": 0.001,
    "s": 1,
    "sec": 1,
    "second": 1,
    "min": 60,
    "minute": 60,
    "h": 3600,
    "hour": 3600,
}


@dataclass(frozen=True)
class Trigger:
    """`available-now` (everything there is, then stop) or `processing-time=<interval>`."""

    available_now: bool
    interval_s: float = 0.0

    @classmethod
    def parse(cls, text: str) -> Trigger:
        if text == "available-now":
            return cls(available_now=True)
        name, _, interval = text.partition("=")
        found = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-z]+)\s*", interval.lower())
        unit = found and (found.group(2) if found.group(2) in _UNITS_S else found.group(2).removesuffix("s"))
        if name == "processing-time" and found and unit in _UNITS_S:
            return cls(available_now=False, interval_s=float(found.group(1)) * _UNITS_S[unit])
        raise argparse.ArgumentTypeError(
            f"trigger must be available-now or processing-time=<number> <ms|seconds|minutes|hours>, not {text!r}"
        )


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m jobs.delta_sink", description=__doc__.split("\n\n")[0])
    parser.add_argument("--bootstrap-servers", required=True, help="host:port[,host:port...] of loglake brokers")
    topics = parser.add_mutually_exclusive_group(required=True)
    topics.add_argument("--topics", help="comma-separated topic names (subscribe)")
    topics.add_argument("--pattern", help="regular expression of topic names (subscribePattern)")
    parser.add_argument("--table", required=True, help="path of the Delta table")
    parser.add_argument(
        "--checkpoint",
        help="not used: the table records how far each partition is (accepted for command lines of the query-id sink)",
    )
    parser.add_argument("--trigger", type=Trigger.parse, default=Trigger(available_now=True))
    parser.add_argument("--group", help="consumer group: start from its offsets and commit each round's ends to it")
    parser.add_argument("--batch", action="store_true", help="one round, up to --ending-offsets")
    parser.add_argument("--starting-offsets", default="earliest", help="startingOffsets of partitions new to the table")
    parser.add_argument("--ending-offsets", default="latest", help="endingOffsets of the source (--batch)")
    parser.add_argument("--max-offsets-per-trigger", type=int, help="at most this many records per round")
    parser.add_argument(
        "--fail-on-data-loss",
        choices=["true", "false"],
        default="true",
        help="failOnDataLoss: fail (true) or skip and log (false) records deleted before they were sunk",
    )
    parser.add_argument("--value-format", choices=["binary", "json"], default="binary")
    parser.add_argument("--value-schema", help="DDL of the JSON value's fields, e.g. 'id BIGINT, name STRING'")
    parser.add_argument("--partition-by-topic", action="store_true")
    parser.add_argument("--partition-by-date", action="store_true", help="also by the record timestamp's UTC date")
    parser.add_argument("--compact-every", type=int, default=0, help="compact small files every N rounds (0: never)")
    parser.add_argument("--max-records-per-task", type=int, help="split ranges into Spark tasks of at most N records")
    add_cluster_arguments(parser)
    args = parser.parse_args(argv)
    if (args.value_format == "json") != (args.value_schema is not None):
        parser.error("--value-schema goes with --value-format json, and json needs one")
    if args.compact_every < 0:
        parser.error("--compact-every must be >= 0")
    args.cluster = cluster_access(parser, args)
    return args


def table_layout(args: argparse.Namespace, json_fields: pa.Schema | None = None) -> TableLayout:
    """topic, partition, offset, timestamp, key, value (or the JSON value's fields), headers,
    and `date` with --partition-by-date; partitioned by topic and/or date as asked."""
    values = list(json_fields) if json_fields is not None else [pa.field("value", pa.binary())]
    fields = [
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("offset", pa.int64()),
        pa.field("timestamp", pa.timestamp("us", tz="UTC")),
        pa.field("key", pa.binary()),
        *values,
        pa.field("headers", HEADERS_TYPE),
    ]
    if args.partition_by_date:
        fields.append(pa.field(DATE_COLUMN, pa.date32()))
    partition_by = (("topic",) if args.partition_by_topic else ()) + ((DATE_COLUMN,) if args.partition_by_date else ())
    return TableLayout(nullable_schema(pa.schema(fields)), partition_by, json_fields)


def json_fields(spark: SparkSession, ddl: str) -> pa.Schema:
    """The Arrow fields of a Spark DDL ('id BIGINT, name STRING'), checked against the table's own columns."""
    from pyspark.errors import PySparkException
    from pyspark.sql.pandas.types import to_arrow_schema
    from pyspark.sql.types import StructType

    try:
        schema = StructType.fromDDL(ddl)
    except PySparkException as exc:
        raise SystemExit(f"--value-schema {ddl!r}: {exc}") from None
    if not isinstance(schema, StructType):
        raise SystemExit(f"--value-schema is a list of fields ('id BIGINT, name STRING'), not {ddl!r}")
    clashes = sorted(set(schema.fieldNames()) & {*KEY_COLUMNS, "timestamp", "key", "headers", DATE_COLUMN})
    if clashes:
        raise SystemExit(f"--value-schema fields clash with the table's own columns: {', '.join(clashes)}")
    return nullable_schema(to_arrow_schema(schema, timezone="UTC"))


def loglake_source_options(args: argparse.Namespace) -> dict[str, str]:
    """Options of the `loglake` source, named as Spark's Kafka source names them."""
    options = {
        **args.cluster.source_options(),
        "startingOffsets": args.starting_offsets,
        "includeHeaders": "true",
    }
    if args.topics:
        options["subscribe"] = args.topics
    else:
        options["subscribePattern"] = args.pattern
    if args.group:
        options["kafka.group.id"] = args.group
    if args.batch:
        options["endingOffsets"] = args.ending_offsets
    elif args.max_offsets_per_trigger:
        options["maxOffsetsPerTrigger"] = str(args.max_offsets_per_trigger)
    return options


def read_options(args: argparse.Namespace) -> ReadOptions:
    return parse_read_options(
        loglake_source_options(args) | {"failOnDataLoss": args.fail_on_data_loss}, streaming=not args.batch
    )


def sink_round(
    writer: LakeWriter, read: ReadOptions, targets: dict[TopicPartition, int] | None, limit: int | None
) -> RoundOutcome:
    """One round: plan from the table up to `targets` (None: the log's ends now), at most `limit` records."""
    with connect(read) as client:
        return writer.run_round(lambda snapshot: plan_from_log(client, writer.table, read, snapshot, targets, limit))


def run(spark: SparkSession, args: argparse.Namespace) -> None:
    if args.checkpoint:
        log.info("--checkpoint %s is not used: the table records how far each partition is", args.checkpoint)
    layout = table_layout(args, json_fields(spark, args.value_schema) if args.value_schema else None)
    read = read_options(args)
    writer = LakeWriter(spark, LakeTable(args.table, layout), read)
    if args.max_records_per_task:
        writer.max_records_per_task = args.max_records_per_task
    while True:
        started = time.monotonic()
        # --batch and available-now: the ends when the run starts (--ending-offsets), reached
        # in one round (--batch) or rounds of --max-offsets-per-trigger; processing-time: a
        # round up to the log's end now, per interval.
        targets = None
        if args.batch or args.trigger.available_now:
            with connect(read) as client:
                partitions = discover_partitions(client, read.selection)
                targets = resolve_offsets(
                    client, partitions, read.ending, starting=False, fail_on_data_loss=read.fail_on_data_loss
                )
        limit = None if args.batch else args.max_offsets_per_trigger
        while True:
            outcome = sink_round(writer, read, targets, limit)
            finish_round(writer, args, outcome, read, last=args.batch)
            # Without a limit one round reaches the targets; with one, a round that moved no
            # partition's end means they are reached.
            if args.batch or not args.trigger.available_now or limit is None or not outcome.ends:
                break
        if args.batch or args.trigger.available_now:
            return
        time.sleep(max(0.0, args.trigger.interval_s - (time.monotonic() - started)))


def finish_round(
    writer: LakeWriter, args: argparse.Namespace, outcome: RoundOutcome, read: ReadOptions, last: bool = False
) -> None:
    """After a committed round: the group's offsets, and OPTIMIZE every --compact-every rounds."""
    log.info("round %d: %d rows in %d files, version %s", writer.rounds, outcome.rows, outcome.files, outcome.version)
    if args.group and outcome.ends:
        with read.client() as client:
            commit_offsets(client, args.group, outcome.ends)
    due = outcome.files > 0 and writer.rounds % args.compact_every == 0 if args.compact_every else False
    if args.compact_every and outcome.version is not None and (last or due):
        DeltaTable(args.table).optimize.compact()


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    with job_session("loglake-delta-sink", LAKE_WRITER_JAVA_OPTIONS) as spark:
        run(spark, args)


if __name__ == "__main__":
    main()
