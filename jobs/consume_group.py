"""Topics read as a consumer group, transformed, written, committed: `python -m jobs.consume_group`
or `spark-submit jobs/consume_group.py`.

Each run reads every partition from the group's committed offset (partitions without one: from
--starting-offsets) up to the high watermark it sees when it starts, applies the transform (a SQL
select list, or a Python function `module:function` taking and returning a DataFrame), writes the
result to Parquet, a Delta table or a topic, then commits the ends to the group. The plan is
committed to the group before writing, so a rerun after a crash finishes the same run: no record is
lost, and with a Delta or topic target none is written twice (docs/spark.md, "consume_group").

    python -m jobs.consume_group --bootstrap-servers localhost:9092 --group orders-etl --topics orders \\
        --select "key, upper(cast(value AS string)) AS value" --delta /data/orders
"""

from __future__ import annotations

import argparse
import importlib
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from loglake.spark import job_session
from loglake.spark.delta_sink import DeltaWriter
from loglake.spark.faults import fault_point
from loglake.spark.group_runs import GroupPositions, Run, commit_plan, commit_run, group_positions
from loglake.spark.job_cluster import add_cluster_arguments, cluster_access
from loglake.spark.offset_ranges import connect, discover_partitions, plan_batch
from loglake.spark.options import ReadOptions, parse_read_options
from loglake.spark.run_targets import DeltaTarget, ParquetTarget, RunTarget, TopicTarget

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

# LOGLAKE_FAULT=after-target-write[:<run id>]: exit after a run is written, before its offsets are
# committed: the crash the rerun must survive without losing or repeating records.
FAULT_AFTER_TARGET_WRITE = "after-target-write"
# The view the --select list reads from.
RECORDS_VIEW = "records"

log = logging.getLogger("jobs.consume_group")

Transform = Callable[["DataFrame"], "DataFrame"]


def load_function(spec: str) -> Transform:
    """`module:function`, imported now so that a bad name fails before Spark starts."""
    module_name, _, name = spec.partition(":")
    if not module_name or not name:
        raise argparse.ArgumentTypeError(f"a function is named module:function, not {spec!r}")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise argparse.ArgumentTypeError(f"cannot import {module_name!r} ({exc})") from None
    function = getattr(module, name, None)
    if not callable(function):
        raise argparse.ArgumentTypeError(f"{module_name!r} has no function {name!r}")
    return function


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m jobs.consume_group", description=__doc__.split("\n\n")[0])
    parser.add_argument("--bootstrap-servers", required=True, help="host:port[,host:port...] of loglake brokers")
    parser.add_argument("--group", required=True, help="the consumer group whose offsets are read and committed")
    topics = parser.add_mutually_exclusive_group(required=True)
    topics.add_argument("--topics", help="comma-separated topic names (subscribe)")
    topics.add_argument("--pattern", help="regular expression of topic names (subscribePattern)")
    parser.add_argument("--starting-offsets", default="earliest", help="where partitions without a commit start")
    parser.add_argument("--fail-on-data-loss", choices=["true", "false"], default="true")
    transform = parser.add_mutually_exclusive_group()
    transform.add_argument("--select", help=f"SQL select list over the records (SELECT <list> FROM {RECORDS_VIEW})")
    transform.add_argument("--function", type=load_function, help="module:function, DataFrame in, DataFrame out")
    parser.add_argument("--where", help="SQL condition on the records, applied before --select")
    target = parser.add_mutually_exclusive_group(required=True)
    target.add_argument("--parquet", metavar="PATH", help="append to Parquet files (at-least-once)")
    target.add_argument("--delta", metavar="PATH", help="a Delta table (exactly once)")
    target.add_argument("--topic", help="a topic (exactly once; the output has Spark's Kafka sink columns)")
    parser.add_argument("--engine", choices=["auto", "deltalake", "delta-spark"], default="auto", help="--delta writer")
    add_cluster_arguments(parser)
    args = parser.parse_args(argv)
    if args.where and args.function:
        parser.error("--where goes with --select (a --function filters as it likes)")
    args.cluster = cluster_access(parser, args)
    return args


def read_options(args: argparse.Namespace) -> ReadOptions:
    """The source's options for planning: the group's offsets, else --starting-offsets."""
    options = {
        **args.cluster.source_options(),
        "startingOffsets": args.starting_offsets,
        "failOnDataLoss": args.fail_on_data_loss,
        "kafka.group.id": args.group,
        # One range per partition from the group's offset: the planning of commitOffsets. The
        # run itself reads its planned ranges and commits after writing, not in the tasks.
        "commitOffsets": "true",
    }
    options["subscribe" if args.topics else "subscribePattern"] = args.topics or args.pattern
    return parse_read_options(options, streaming=False)


def make_target(spark: SparkSession, args: argparse.Namespace) -> RunTarget:
    if args.delta:
        return DeltaTarget(
            DeltaWriter(spark, args.delta, [], args.engine), app_id=f"loglake-consume-group:{args.group}"
        )
    if args.topic:
        return TopicTarget(spark, args.cluster, args.topic, args.group)
    return ParquetTarget(args.parquet)


def transform(spark: SparkSession, records: DataFrame, args: argparse.Namespace) -> DataFrame:
    if args.function is not None:
        output = args.function(records)
        if not hasattr(output, "schema") or not hasattr(output, "write"):
            raise TypeError(f"--function returned {type(output).__name__}, not a DataFrame")
        return output
    records.createOrReplaceTempView(RECORDS_VIEW)
    where = f" WHERE {args.where}" if args.where else ""
    return spark.sql(f"SELECT {args.select or '*'} FROM {RECORDS_VIEW}{where}")


def execute(spark: SparkSession, args: argparse.Namespace, options: ReadOptions, target: RunTarget, run: Run) -> None:
    """Read the run's ranges, transform, write, commit."""
    import loglake.spark

    # Tiered ranges are read from the lake's Parquet files by Spark itself.
    records = loglake.spark.read_topic(
        spark,
        **args.cluster.source_options(),
        includeHeaders="true",
        failOnDataLoss=args.fail_on_data_loss,
        **run.source_options(),
    )
    rows = target.write(run, transform(spark, records, args))
    ranges = ", ".join(f"{r.topic}-{r.partition} [{r.start}, {r.end})" for r in run.ranges)
    written = "written" if rows is None else f"{rows} rows written"  # a topic's tasks count their own
    log.info("run %d%s: %s from %s", run.run_id, " (resumed)" if run.resumed else "", written, ranges)
    fault_point(FAULT_AFTER_TARGET_WRITE, run.run_id)
    with connect(options) as client:
        commit_run(client, args.group, run)


def positions(options: ReadOptions, group: str) -> GroupPositions:
    with connect(options) as client:
        return group_positions(client, group, discover_partitions(client, options.selection))


def run(spark: SparkSession, args: argparse.Namespace) -> Run | None:
    """Finish a run a crashed process left planned, then make one more; the run made (None:
    nothing to read)."""
    import loglake.spark

    loglake.spark.register(spark)
    options = read_options(args)
    target = make_target(spark, args)
    pending = positions(options, args.group).pending_run()
    if pending is not None:
        execute(spark, args, options, target, pending)
    ranges = tuple(plan_batch(options))
    if not ranges:
        log.info("group %s is at the end of every partition", args.group)
        return None
    run_id = 1 + max(positions(options, args.group).last_run_id, target.last_run_id())
    planned = Run(run_id, ranges, target.prepare())
    with connect(options) as client:
        commit_plan(client, args.group, planned)
    execute(spark, args, options, target, planned)
    return planned


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    with job_session("loglake-consume-group") as spark:
        run(spark, args)


if __name__ == "__main__":
    main()
