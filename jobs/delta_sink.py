"""Topics into a Delta table, exactly once: `python -m jobs.delta_sink` or `spark-submit jobs/delta_sink.py`.

Streaming (the default): `spark.readStream.format("loglake")` into `foreachBatch(DeltaSink)`, each
micro-batch committed with the query's id and the batch id as a Delta app transaction; a
restart on the same checkpoint resumes there, and a batch Spark replays after a crash is
skipped. `--batch` reads a range once (`spark.read`) and MERGEs it on (topic, partition, offset),
so rerunning a range already sunk adds nothing.

    python -m jobs.delta_sink --bootstrap-servers localhost:9092 --topics orders \\
        --table /data/orders --checkpoint /data/orders.checkpoint --trigger available-now
"""

from __future__ import annotations

import argparse
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from loglake.spark import job_session
from loglake.spark.delta_sink import DeltaSink, DeltaSinkOptions
from loglake.spark.job_cluster import add_cluster_arguments, cluster_access

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, DataFrameReader, SparkSession
    from pyspark.sql.streaming import DataStreamReader

@dataclass(frozen=True)
class Trigger:
    """`available-now` (everything there is, then stop) or `processing-time=<interval>`."""

    available_now: bool
    processing_time: str | None = None

    @classmethod
    def parse(cls, text: str) -> Trigger:
        if text == "available-now":
            return cls(available_now=True)
        name, _, interval = text.partition("=")
        if name == "processing-time" and interval:
            return cls(available_now=False, processing_time=interval)
        raise argparse.ArgumentTypeError(f"trigger must be available-now or processing-time=<interval>, not {text!r}")

    def spark_kwargs(self) -> dict[str, object]:
        return {"availableNow": True} if self.available_now else {"processingTime": self.processing_time}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m jobs.delta_sink", description=__doc__.split("\n\n")[0])
    parser.add_argument("--bootstrap-servers", help="host:port[,host:port...] of loglake brokers")
    topics = parser.add_mutually_exclusive_group()
    topics.add_argument("--topics", help="comma-separated topic names (subscribe)")
    topics.add_argument("--pattern", help="regular expression of topic names (subscribePattern)")
    parser.add_argument("--table", required=True, help="path of the Delta table")
    parser.add_argument("--checkpoint", help="streaming checkpoint directory (required unless --batch)")
    parser.add_argument("--trigger", type=Trigger.parse, default=Trigger(available_now=True))
    parser.add_argument("--group", help="consumer group: start from its offsets and commit each batch's to it")
    parser.add_argument("--batch", action="store_true", help="read the range once and MERGE it (rerun-safe)")
    parser.add_argument("--starting-offsets", default="earliest", help="startingOffsets of the source")
    parser.add_argument("--ending-offsets", default="latest", help="endingOffsets of the source (--batch)")
    parser.add_argument("--max-offsets-per-trigger", type=int, help="maxOffsetsPerTrigger of the source")
    parser.add_argument("--value-format", choices=["binary", "json"], default="binary")
    parser.add_argument("--value-schema", help="DDL of the JSON value's fields, e.g. 'id BIGINT, name STRING'")
    parser.add_argument("--partition-by-topic", action="store_true")
    parser.add_argument("--partition-by-date", action="store_true", help="also by the record timestamp's UTC date")
    parser.add_argument("--compact-every", type=int, default=0, help="compact small files every N micro-batches")
    parser.add_argument("--engine", choices=["auto", "deltalake", "delta-spark"], default="auto")
    parser.add_argument(
        "--test-only-parquet-source",
        metavar="DIR",
        help="TESTS ONLY: read Parquet files in the Kafka source schema from DIR (one file per micro-batch) "
        "instead of loglake topics",
    )
    add_cluster_arguments(parser)
    args = parser.parse_args(argv)
    reads_topics = args.test_only_parquet_source is None
    if reads_topics and not (args.bootstrap_servers and (args.topics or args.pattern)):
        parser.error("--bootstrap-servers and one of --topics / --pattern are required")
    if not args.batch and not args.checkpoint:
        parser.error("--checkpoint is required for a streaming run")
    args.cluster = cluster_access(parser, args)
    return args


def sink_options(args: argparse.Namespace) -> DeltaSinkOptions:
    return DeltaSinkOptions(
        table=args.table,
        partition_by_topic=args.partition_by_topic,
        partition_by_date=args.partition_by_date,
        value_format=args.value_format,
        value_schema=args.value_schema,
        compact_every=args.compact_every,
        engine=args.engine,
    )


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


def load_source(reader: DataFrameReader | DataStreamReader, spark: SparkSession, args: argparse.Namespace) -> DataFrame:
    """The job's input in Spark's Kafka source schema: loglake topics, or the tests' Parquet stand-in."""
    if args.test_only_parquet_source is not None:
        from loglake.spark.source import kafka_schema

        stand_in = reader.schema(kafka_schema(include_headers=True)).option("maxFilesPerTrigger", 1)
        return stand_in.parquet(args.test_only_parquet_source)
    import loglake.spark

    loglake.spark.register(spark)
    return reader.format("loglake").options(**loglake_source_options(args)).load()


def run(spark: SparkSession, args: argparse.Namespace) -> None:
    sink = DeltaSink(spark, sink_options(args))
    logging.getLogger(__name__).info("writing %s with %s", args.table, sink.engine_name)
    if args.batch:
        outcome = sink.write_rerun(load_source(spark.read, spark, args))
        logging.getLogger(__name__).info("batch run: %d new rows", outcome.rows_written)
        return
    query = (
        load_source(spark.readStream, spark, args)
        .writeStream.foreachBatch(sink)
        .option("checkpointLocation", args.checkpoint)
        .trigger(**args.trigger.spark_kwargs())
        .queryName("loglake-delta-sink")
        .start()
    )
    query.awaitTermination()


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    with job_session("loglake-delta-sink") as spark:
        run(spark, args)


if __name__ == "__main__":
    main()
