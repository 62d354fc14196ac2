"""A DataFrame into a Delta table from the executors, committed once by the driver.

Each Spark task writes its share of the rows as Parquet files into the table's directory
(the lake writer's `FileRoller`: files rolled at a target size, Delta statistics) and hands
back only their add actions; the driver commits those in one Delta commit with the app
transaction given (delta-rs `create_write_transaction`). No row passes through the driver.
A retried task's failed attempt leaves files that no add action names (VACUUM removes them):
Spark hands the driver the actions of one successful attempt per task.

`insert_missing` is the same write for rows keyed by the log, (topic, partition, offset), of
which the table may hold some already (`DeltaSink.write_rerun`): a Spark anti-join against
the keys in the files of one pinned Delta version (read by Spark's Parquet reader, only the
files whose statistics may hold the frame's offsets), then the missing rows written by the
tasks and their add actions committed, unless a commit since the pinned version added rows
of the same partitions and offsets: the frame is planned again from the new version.

Used by `DeltaSink` (a streaming query's `foreachBatch`) and `jobs/consume_group.py`'s Delta
target, whose rows are a DataFrame computed by Spark; topics themselves are sunk by the lake
writer, which fetches and decodes in the tasks without a DataFrame at all.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import unquote

import pyarrow as pa
from deltalake import DeltaTable, QueryBuilder, Transaction

from loglake.spark.delta_arrow import add_actions, nullable_schema
from loglake.spark.lake import plain_parquet_refusal
from loglake.spark.lake_writer import (
    DEFAULT_TARGET_FILE_BYTES,
    FileRoller,
    LakeConflict,
    TableLayout,
    WrittenFile,
    check_table,
    commit_files,
    remove_files,
)
from loglake.spark.worker_heap import prepare_worker_heap

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
    from pyspark.sql.types import StructType

log = logging.getLogger(__name__)

_WRITTEN_SCHEMA = pa.schema(
    [
        ("path", pa.string()),
        ("size", pa.int64()),
        ("partition_values", pa.string()),
        ("modification_time", pa.int64()),
        ("stats", pa.string()),
        ("rows", pa.int64()),
    ]
)


def frame_layout(frame: DataFrame, partition_by: list[str]) -> TableLayout:
    """The table's columns for `frame`: its Arrow schema as `toArrow` gives it (UTC
    timestamps), every field nullable (Spark's nullability changes from batch to batch)."""
    from pyspark.sql.pandas.types import to_arrow_schema

    schema = to_arrow_schema(frame.schema, error_on_duplicated_field_names_in_struct=True, timezone="UTC")
    return TableLayout(nullable_schema(schema), tuple(partition_by))


def write_files(
    frame: DataFrame, table: str, layout: TableLayout, target_file_bytes: int = DEFAULT_TARGET_FILE_BYTES
) -> list[WrittenFile]:
    """The frame's rows as Parquet files in `table`'s directory, written by the tasks; what
    each wrote (nothing is committed)."""
    from pyspark.sql.pandas.types import from_arrow_schema

    schema = layout.schema

    def write_partition(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        prepare_worker_heap()
        roller = FileRoller(table, layout, target_file_bytes)
        for batch in batches:
            if batch.num_rows:
                roller.write(pa.Table.from_batches([batch]).cast(schema))
        files = roller.close()
        yield pa.RecordBatch.from_pylist(
            [
                {
                    "path": f.path,
                    "size": f.size,
                    "partition_values": json.dumps(f.partition_values),
                    "modification_time": f.modification_time,
                    "stats": f.stats,
                    "rows": f.rows,
                }
                for f in files
            ],
            schema=_WRITTEN_SCHEMA,
        )

    return [
        WrittenFile(r.path, r.size, json.loads(r.partition_values), r.modification_time, r.stats, r.rows)
        for r in frame.mapInArrow(write_partition, from_arrow_schema(_WRITTEN_SCHEMA)).collect()
    ]


def append_frame(frame: DataFrame, table: str, partition_by: list[str], transaction: Transaction) -> int:
    """Append the frame's rows in one commit recording `transaction`; the rows written. A
    table whose columns, partitioning or features differ fails (`LakeTableError`) before
    anything is written; a rival's commit of the same app id in between (`LakeConflict`)
    leaves the table as the rival made it and removes the files written here."""
    layout = frame_layout(frame, partition_by)
    snapshot = DeltaTable(table) if DeltaTable.is_deltatable(table) else None
    if snapshot is not None:
        check_table(snapshot, table, layout)
    written = write_files(frame, table, layout)
    if not written:
        return 0
    try:
        version = commit_files(table, layout, snapshot, written, [transaction])
    except LakeConflict:
        remove_files(table, written)
        raise
    rows = sum(f.rows for f in written)
    log.info("%s: version %d, %d rows in %d files written by the executors", table, version, rows, len(written))
    return rows


# The rows' key in the log, and the app transaction every `insert_missing` commit records:
# delta-rs refuses a commit whose app transaction a rival's commit recorded meanwhile, so
# two `insert_missing` never both commit on one version.
KEY_COLUMNS = ("topic", "partition", "offset")
INSERT_MISSING_APP_ID = "loglake-insert-missing"
# Plans of one `insert_missing` overtaken by rivals' rows before it fails (LakeConflict).
_INSERT_ATTEMPTS = 5


@dataclass(frozen=True)
class KeyRange:
    """The offsets of one (topic, partition) in a frame: [low, high]."""

    topic: str
    partition: int
    low: int
    high: int

    def may_hold(self, action: dict) -> bool:
        """Whether a file (its flattened add action) may hold keys of this range: its
        statistics, or its partition value for `topic`, say so (no statistics: it may)."""

        def bound(column: str, which: str) -> object:
            return action.get(f"partition.{column}", action.get(f"{which}.{column}"))

        for column, value in (("topic", self.topic), ("partition", self.partition)):
            low, high = bound(column, "min"), bound(column, "max")
            if low is not None and high is not None and not low <= value <= high:  # type: ignore[operator]
                return False
        low, high = action.get("min.offset"), action.get("max.offset")
        return low is None or high is None or (low <= self.high and self.low <= high)


def key_ranges(frame: DataFrame) -> list[KeyRange]:
    """Each (topic, partition) of the frame with its lowest and highest offset (one
    aggregate row per partition reaches the driver)."""
    from pyspark.sql import functions as F

    rows = frame.groupBy("topic", "partition").agg(F.min("offset"), F.max("offset")).collect()
    return [KeyRange(r[0], r[1], r[2], r[3]) for r in rows]


def _key_schema(frame: DataFrame, partition_by: list[str]) -> StructType:
    """The key columns and the partition columns, typed as in the frame."""
    from pyspark.sql.types import StructType

    names = list(dict.fromkeys([*KEY_COLUMNS, *partition_by]))
    return StructType([frame.schema[name] for name in names])


def existing_keys(frame: DataFrame, snapshot: DeltaTable, partition_by: list[str], ranges: list[KeyRange]) -> DataFrame:
    """The keys of `ranges` in the snapshot's rows: read by Spark's Parquet reader from the
    files whose statistics may hold them; through delta-rs's query engine where plain Parquet
    would be wrong (deletion vectors), which brings only those keys to the driver."""
    from functools import reduce

    from pyspark.sql import functions as F

    spark = frame.sparkSession
    schema = _key_schema(frame, partition_by)
    within = reduce(
        lambda a, b: a | b,
        [
            (F.col("topic") == r.topic) & (F.col("partition") == r.partition) & F.col("offset").between(r.low, r.high)
            for r in ranges
        ],
    )
    if plain_parquet_refusal(snapshot) is not None:
        # `partition` and `offset` are SQL keywords: quoted.
        where = " OR ".join(
            f'("topic" = \'{r.topic}\' AND "partition" = {r.partition} AND "offset" BETWEEN {r.low} AND {r.high})'
            for r in ranges
        )
        query = f'SELECT "topic", "partition", "offset" FROM t WHERE {where}'
        keys = pa.table(QueryBuilder().register("t", snapshot).execute(query).read_all())
        return spark.createDataFrame(
            keys.cast(pa.schema([("topic", pa.string()), ("partition", pa.int32()), ("offset", pa.int64())]))
        )
    root = snapshot.table_uri.rstrip("/")
    actions = add_actions(snapshot)
    uris = [f"{root}/{unquote(a['path'])}" for a in actions if any(r.may_hold(a) for r in ranges)]
    if not uris:
        return spark.createDataFrame([], schema).select(*KEY_COLUMNS)
    # basePath: the partition columns (topic, date) come from the files' directories.
    files = spark.read.schema(schema).option("basePath", root).parquet(*uris)
    return files.where(within).select(*KEY_COLUMNS)


def _added_since(table: str, snapshot: DeltaTable | None, ranges: list[KeyRange]) -> DeltaTable | None:
    """The table's latest version, unless a commit since `snapshot` added files that may hold
    keys of `ranges` (LakeConflict: the rows missing from `snapshot` may be there now)."""
    if not DeltaTable.is_deltatable(table):
        return None
    latest = DeltaTable(table)
    if snapshot is None:
        raise LakeConflict(f"{table}: created by a rival writer meanwhile")
    if latest.version() == snapshot.version():
        return latest
    before = set(pa.table(snapshot.get_add_actions(flatten=True))["path"].to_pylist())
    for action in add_actions(latest):
        if action["path"] not in before and any(r.may_hold(action) for r in ranges):
            raise LakeConflict(f"{table}: a rival writer added rows of the same partitions meanwhile")
    return latest


def insert_missing(frame: DataFrame, table: str, partition_by: list[str]) -> int:
    """Append the frame's rows whose (topic, partition, offset) the table lacks; the rows
    written. Planned on the table's latest version; a rival's commit of rows of the same
    partitions and offsets before this one's makes it plan again (LakeConflict after
    `_INSERT_ATTEMPTS` plans)."""
    layout = frame_layout(frame, partition_by)
    ranges = key_ranges(frame)
    if not ranges:
        return 0
    for attempt in range(1, _INSERT_ATTEMPTS + 1):
        snapshot = DeltaTable(table) if DeltaTable.is_deltatable(table) else None
        missing = frame
        if snapshot is not None:
            check_table(snapshot, table, layout)
            missing = frame.join(existing_keys(frame, snapshot, partition_by, ranges), list(KEY_COLUMNS), "left_anti")
        written = write_files(missing, table, layout)
        if not written:
            return 0
        try:
            latest = _added_since(table, snapshot, ranges)
            guard = Transaction(INSERT_MISSING_APP_ID, 0 if latest is None else latest.version() + 1)
            version = commit_files(table, layout, latest, written, [guard])
        except LakeConflict as exc:
            remove_files(table, written)
            log.info("%s; planning the insert again (attempt %d)", exc, attempt + 1)
            continue
        rows = sum(f.rows for f in written)
        log.info(
            "%s: version %d, %d missing rows in %d files written by the executors", table, version, rows, len(written)
        )
        return rows
    raise LakeConflict(
        f"{table}: rival writers added rows of the same partitions during each of {_INSERT_ATTEMPTS} plans"
    )
