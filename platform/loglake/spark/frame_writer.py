"""A DataFrame into a Delta table from the executors, committed once by the driver.

Each Spark task writes its share of the rows as Parquet files into the table's directory
(the lake writer's `FileRoller`: files rolled at a target size, Delta statistics) and hands
back only their add actions; the driver commits those in one Delta commit with the app
transaction given (delta-rs `create_write_transaction`). No row passes through the driver.
A retried task's failed attempt leaves files that no add action names (VACUUM removes them):
Spark hands the driver the actions of one successful attempt per task.

Used by `DeltaSink` (a streaming query's `foreachBatch`) and `jobs/consume_group.py`'s Delta
target, whose rows are a DataFrame computed by Spark; topics themselves are sunk by the lake
writer, which fetches and decodes in the tasks without a DataFrame at all.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pyarrow as pa
from deltalake import DeltaTable, Transaction

from loglake.spark.delta_arrow import nullable_schema
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

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

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
