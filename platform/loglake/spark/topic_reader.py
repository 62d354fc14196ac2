"""`read_topic`: a topic as one DataFrame, its tiered part read by Spark's own Parquet reader.

The driver plans every partition's offset range as the `loglake` source does (same options,
same `earliest`, which starts at the lake), pins the topic's Delta table at one version and
cuts each range at that version's tiered extent ([lake start, tiered end)):

- inside it, Spark's native Parquet reader scans only that version's files of the
  partition (partition pruning by the table's partition values, file pruning by the
  files' offset statistics, row-group pruning by the offset filter it pushes down);
- outside it (below an expired lake start, above the tiered end), the `loglake` source reads
  exactly those offsets from the brokers (`assign` with starting/ending offsets per part).

The parts are disjoint offset ranges that together cover the planned range, so the union
has no gap and no duplicate whatever tiering or retention does meanwhile. A table whose
reader features a plain Parquet scan cannot honour (deletion vectors, column mapping) is
not scanned natively: the whole topic goes through the `loglake` source, whose lake read
understands them.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Mapping
from dataclasses import dataclass, replace
from functools import reduce
from typing import TYPE_CHECKING, cast
from urllib.parse import unquote

from deltalake import DeltaTable

from loglake.protocol import IsolationLevel
from loglake.spark.delta_arrow import add_actions
from loglake.spark.kafka_columns import KAFKA_COLUMNS
from loglake.spark.lake import ABORTED_COLUMN, DATE_COLUMN, Lake, lakes_for, plain_parquet_refusal
from loglake.spark.offset_ranges import OffsetRange, connect, plan_batch
from loglake.spark.options import OptionError, ReadOptions, parse_read_options

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

log = logging.getLogger(__name__)

# The options that choose what is read: read_topic resolves them to offsets itself.
_SELECTION_OPTIONS = frozenset(
    name.lower()
    for name in (
        "subscribe",
        "subscribePattern",
        "assign",
        "startingOffsets",
        "endingOffsets",
        "startingTimestamp",
        "endingTimestamp",
        "startingOffsetsByTimestamp",
        "endingOffsetsByTimestamp",
        "startingOffsetsByTimestampStrategy",
        "minPartitions",
    )
)


@dataclass(frozen=True)
class PinnedFiles:
    """A table's pinned version: its root URI and its files' add actions (flattened)."""

    root: str
    actions: list[dict]


@dataclass(frozen=True)
class TopicPlan:
    """A read cut into the offsets read from the lake's files and those read from brokers."""

    lake_parts: list[tuple[Lake, OffsetRange]]
    # at most one part per partition in each read (the source takes one range per partition)
    broker_reads: list[list[OffsetRange]]
    files: dict[str, PinnedFiles]  # by table


def _scan_refusal(table: DeltaTable, files: PinnedFiles) -> str | None:
    """Why the table's files cannot be scanned as plain Parquet in Hive-style directories
    (`partition=<p>/...`, where delta-rs and Spark put a partitioned table's files unless
    column mapping is on), None if they can."""
    refusal = plain_parquet_refusal(table)
    hive = all(a["path"].startswith(f"partition={a['partition.partition']}/") for a in files.actions)
    if refusal is None and not hive:
        refusal = "files outside partition=<p>/ directories"
    return refusal


def plan_topic_read(options: ReadOptions) -> TopicPlan:
    """Every partition's range, planned whole, cut at its lake's pinned extent."""
    whole = replace(options, min_partitions=None, max_records_per_partition=sys.maxsize)
    ranges = [r for r in plan_batch(whole) if r.size > 0]
    with connect(options) as client:
        lakes = lakes_for(client, {r.topic for r in ranges}) if ranges else {}
    scannable = {}
    pinned_files = {}
    for topic, candidate in lakes.items():
        table = DeltaTable(candidate.table, version=candidate.version)
        files = PinnedFiles(table.table_uri.rstrip("/"), add_actions(table))
        refusal = _scan_refusal(table, files)
        if refusal is None:
            scannable[topic] = candidate
            pinned_files[candidate.table] = files
        else:
            log.info("%s: %s; its tiered part is read through the loglake source", candidate.table, refusal)
    lake_parts: list[tuple[Lake, OffsetRange]] = []
    below: list[OffsetRange] = []
    above: list[OffsetRange] = []
    for r in ranges:
        lake = scannable.get(r.topic)
        extent = None if lake is None else lake.extents.get(r.partition)
        if lake is None or extent is None:
            above.append(r)
            continue
        first = min(r.end, max(r.start, extent[0]))
        last = max(first, min(r.end, extent[1]))
        for start, end, into in ((r.start, first, below), (last, r.end, above)):
            if end > start:
                into.append(OffsetRange(r.topic, r.partition, start, end))
        if last > first:
            lake_parts.append((lake, OffsetRange(r.topic, r.partition, first, last)))
    return TopicPlan(lake_parts, [parts for parts in (below, above) if parts], pinned_files)


def _source_options(options: Mapping[str, str], parts: list[OffsetRange]) -> dict[str, str]:
    """The `loglake` source's options reading exactly `parts`."""
    assign: dict[str, list[int]] = {}
    starts: dict[str, dict[str, int]] = {}
    ends: dict[str, dict[str, int]] = {}
    for r in parts:
        assign.setdefault(r.topic, []).append(r.partition)
        starts.setdefault(r.topic, {})[str(r.partition)] = r.start
        ends.setdefault(r.topic, {})[str(r.partition)] = r.end
    kept = {k: v for k, v in options.items() if k.lower() not in _SELECTION_OPTIONS}
    return kept | {
        "assign": json.dumps(assign),
        "startingOffsets": json.dumps(starts),
        "endingOffsets": json.dumps(ends),
    }


@dataclass(frozen=True)
class PartFiles:
    """The pinned version's files of one lake part: those whose every row belongs to the read
    (offsets within the part, no aborted row where read_committed), and those to filter."""

    whole: list[str]
    filtered: list[str]


def _part_files(actions: list[dict], root: str, part: OffsetRange, read_committed: bool) -> PartFiles:
    """The files of the part's partition whose offsets may fall in the part, sorted by
    whether their statistics prove that no row needs filtering."""
    files = PartFiles([], [])
    for action in actions:
        low, high = action.get("min.offset"), action.get("max.offset")
        if action["partition.partition"] != part.partition:
            continue
        if low is not None and high is not None and (high < part.start or low >= part.end):
            continue
        inside = low is not None and high is not None and part.start <= low and high < part.end
        # No aborted row: the flag's maximum is false, or every row's flag is null (tiered before it).
        committed = action.get(f"max.{ABORTED_COLUMN}") is False or action.get(
            f"null_count.{ABORTED_COLUMN}"
        ) == action.get("num_records")
        whole = inside and (committed or not read_committed)
        (files.whole if whole else files.filtered).append(f"{root}/{unquote(action['path'])}")
    return files


def _file_schema() -> StructType:
    """The data files' columns as Spark reads them: the source's columns but the partition
    columns (`partition` is in the path, `topic` is the table's), and the aborted flag (null
    in files tiered before it existed)."""
    from pyspark.sql.types import BooleanType, StructField

    from loglake.spark.source import columns_schema

    stored = tuple(n for n in KAFKA_COLUMNS.names if n not in ("partition", "topic"))
    return columns_schema(stored).add(StructField(ABORTED_COLUMN, BooleanType()))


def _table_frames(
    spark: SparkSession,
    root: str,
    parts: list[tuple[OffsetRange, PartFiles]],
    columns: tuple[str, ...],
    read_committed: bool,
) -> list[DataFrame]:
    """One table's lake parts read by Spark's Parquet reader: the files wholly in the read in
    one scan, the others in one scan filtered to each part's offsets. The files lie in
    Hive-style directories (`_scan_refusal`), so one scan with `basePath` at the table gets
    `partition` from the paths (a scan per partition with the value as a literal cost Spark
    about twice the CPU, measured)."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import DateType, IntegerType, StructField

    topic = parts[0][0].topic
    projection = [(F.lit(topic) if n == "topic" else F.col(n)).alias(n) for n in columns]
    schema = _file_schema().add(StructField("partition", IntegerType())).add(StructField(DATE_COLUMN, DateType()))
    reader = spark.read.schema(schema).option("basePath", root)
    frames = []
    whole = [uri for _, files in parts for uri in files.whole]
    if whole:
        frames.append(reader.parquet(*whole).select(*projection))
    filtered = [(part, files.filtered) for part, files in parts if files.filtered]
    if filtered:
        where = reduce(
            lambda a, b: a | b,
            [
                (F.col("partition") == part.partition) & (F.col("offset") >= part.start) & (F.col("offset") < part.end)
                for part, _ in filtered
            ],
        )
        if read_committed:
            where &= F.col(ABORTED_COLUMN).isNull() | ~F.col(ABORTED_COLUMN)
        uris = [uri for _, part_uris in filtered for uri in part_uris]
        frames.append(reader.parquet(*uris).where(where).select(*projection))
    return frames


def read_topic(
    spark: SparkSession, topic: str | None = None, *, schema: StructType | str | None = None, **options: object
) -> DataFrame:
    """Topics as one batch DataFrame, like `spark.read.format("loglake")` with `options` (the
    Kafka source's option names; `topic` is `subscribe`, comma-separated), but with the tiered
    part read by Spark's Parquet reader from one pinned Delta version. `schema`: any of the
    Kafka source's columns, in any order (default: all, headers with includeHeaders=true)."""
    from pyspark.sql.types import StructType as SparkStruct

    from loglake.spark.registration import register
    from loglake.spark.source import columns_schema, selected_columns

    register(spark)
    given = {k: v if isinstance(v, str) else json.dumps(v) for k, v in options.items()}
    if topic is not None:
        given["subscribe"] = topic
    parsed = parse_read_options(given, streaming=False)
    if parsed.commit_offsets:
        raise OptionError("commitOffsets: read_topic does not commit offsets (use spark.read.format('loglake'))")
    if schema is not None:
        # fromDDL is typed DataType; a column list's DDL gives a StructType.
        struct = schema if isinstance(schema, SparkStruct) else cast(SparkStruct, SparkStruct.fromDDL(schema))
        parsed = replace(parsed, columns=selected_columns(struct))
    columns = parsed.columns
    plan = plan_topic_read(parsed)
    read_committed = parsed.isolation_level == IsolationLevel.READ_COMMITTED
    frames = []
    parts_of: dict[str, list[tuple[OffsetRange, PartFiles]]] = {}
    for lake, part in plan.lake_parts:
        pinned = plan.files[lake.table]
        files = _part_files(pinned.actions, pinned.root, part, read_committed)
        if files.whole or files.filtered:
            parts_of.setdefault(lake.table, []).append((part, files))
    for table, parts in parts_of.items():
        frames += _table_frames(spark, plan.files[table].root, parts, columns, read_committed)
    for broker_ranges in plan.broker_reads:
        reader = spark.read.format("loglake").schema(columns_schema(columns))
        frames.append(reader.options(**_source_options(given, broker_ranges)).load())
    if not frames:
        return spark.createDataFrame([], columns_schema(columns))
    return reduce(lambda a, b: a.unionByName(b), frames)
