"""Retention of a topic's lake rows: where each partition's lake part may start now that its
retention.ms / retention.bytes (whole history: lake + local log) expire older rows.

The cut of each partition is worked out in a Spark task of its own, which reads that
partition's files of a pinned table version (only the columns the rule needs) on the
executor; the driver receives one (partition, cut) pair per partition, never a row.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import unquote

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from loglake.spark.cluster_admin import TOPIC_RESOURCE, describe_configs
from loglake.spark.delta_arrow import add_actions
from loglake.spark.lake import plain_parquet_refusal
from loglake.spark.lake_writer import LakeTableError, table_filesystem

if TYPE_CHECKING:
    from deltalake import DeltaTable
    from pyspark.sql import SparkSession

    from loglake.spark.job_cluster import Cluster


@dataclass(frozen=True)
class Retention:
    """A topic's retention.ms and retention.bytes (-1: no limit)."""

    ms: int
    bytes: int

    @classmethod
    def of(cls, cluster: Cluster, topic: str) -> Retention:
        configs = describe_configs(cluster.client, TOPIC_RESOURCE, topic, ["retention.ms", "retention.bytes"])
        return cls(int(configs.get("retention.ms") or -1), int(configs.get("retention.bytes") or -1))


@dataclass(frozen=True)
class LocalLog:
    """What a partition's leader says of its local log: where it starts and its bytes."""

    start: int
    size: int


def retention_cut(
    offsets: pa.Array,
    timestamps_ms: pa.Array,
    sizes: pa.Array | None,
    log_start: int,
    log_size: int,
    retention: Retention,
    now_ms: int,
) -> int | None:
    """Where a partition's lake part may start now (rows below it expired), None if nothing
    expired. `offsets` ascending, with the records' timestamps and (for retention.bytes)
    stored sizes. As Kafka's retention, only a leading run goes: by time, the rows before
    the first one not older than retention.ms; by size, the oldest rows that are only in
    the lake (below `log_start`) while they and the local log exceed retention.bytes."""
    n = len(offsets)
    keep = 0  # index of the first row kept
    if retention.ms >= 0:
        young = pc.greater_equal(timestamps_ms, now_ms - retention.ms)
        first_young = pc.index(young, True).as_py()
        keep = n if first_young < 0 else first_young
    if retention.bytes >= 0 and sizes is not None:
        lake_only = pc.sum(pc.less(offsets, log_start)).as_py() or 0
        cumulative = np.cumsum(sizes.slice(0, lake_only).to_numpy(zero_copy_only=False))
        excess = (int(cumulative[-1]) if lake_only else 0) + log_size - retention.bytes
        if excess > 0:
            # The fewest oldest rows whose bytes cover the excess (all lake-only rows at most).
            keep = max(keep, min(int(np.searchsorted(cumulative, excess)) + 1, lake_only))
    if keep == 0:
        return None
    return offsets[keep].as_py() if keep < n else offsets[n - 1].as_py() + 1


def record_sizes(rows: pa.Table) -> pa.Array:
    """Each record's stored bytes in the lake: key + value + its headers' keys and values."""
    sizes = pc.add(
        pc.fill_null(pc.binary_length(rows["key"]), 0), pc.fill_null(pc.binary_length(rows["value"]), 0)
    ).to_numpy(zero_copy_only=False)
    headers = rows["headers"].combine_chunks()
    flat = pc.list_flatten(headers)
    if len(flat):
        header_bytes = pc.add(
            pc.fill_null(pc.binary_length(pc.struct_field(flat, "key")), 0),
            pc.fill_null(pc.binary_length(pc.struct_field(flat, "value")), 0),
        ).to_numpy(zero_copy_only=False)
        owners = pc.list_parent_indices(headers).to_numpy(zero_copy_only=False)
        sizes = sizes + np.bincount(owners, weights=header_bytes, minlength=len(sizes)).astype(np.int64)
    return pa.array(sizes, pa.int64())


@dataclass(frozen=True)
class CutTask:
    """One partition's lake rows to judge (pickled to an executor): its files (paths relative
    to `table`) in the pinned version, its local log, the topic's retention."""

    table: str
    partition: int
    files: tuple[str, ...]
    log: LocalLog
    retention: Retention
    now_ms: int


def partition_cut(task: CutTask) -> tuple[int, int | None]:
    """(partition, cut) of one partition, from its files read in the task that runs this."""
    filesystem, base = table_filesystem(task.table)
    columns = ["offset", "timestamp"] + (["key", "value", "headers"] if task.retention.bytes >= 0 else [])
    parts = []
    for path in task.files:
        with filesystem.open_input_file(f"{base}/{path}") as f:
            parts.append(pq.ParquetFile(f).read(columns=columns))
    rows = pa.concat_tables(parts)
    if not rows.num_rows:
        return task.partition, None
    rows = rows.take(pc.sort_indices(rows, [("offset", "ascending")]))
    millis = pc.divide(pc.cast(pc.cast(rows["timestamp"], pa.timestamp("us")), pa.int64()), 1000)
    sizes = record_sizes(rows) if task.retention.bytes >= 0 else None
    cut = retention_cut(
        rows["offset"].combine_chunks(),
        millis.combine_chunks(),
        sizes,
        task.log.start,
        task.log.size,
        task.retention,
        task.now_ms,
    )
    return task.partition, cut


def retention_cuts(
    spark: SparkSession,
    snapshot: DeltaTable,
    table: str,
    logs: Mapping[int, LocalLog],
    retention: Retention,
    now_ms: int,
) -> dict[int, int]:
    """The cut of each partition of `logs` whose rows in `snapshot` retention expires (one
    Spark task a partition with rows). LakeTableError for a table whose files are not
    plain Parquet (deletion vectors, column mapping): their rows cannot be read as such."""
    refusal = plain_parquet_refusal(snapshot)
    if refusal is not None:
        raise LakeTableError(f"{table}: cannot expire rows from a table with {refusal}")
    files: dict[int, list[str]] = defaultdict(list)
    for action in add_actions(snapshot):
        partition = action["partition.partition"]
        if partition in logs:
            files[partition].append(unquote(action["path"]))
    tasks = [
        CutTask(table, partition, tuple(paths), logs[partition], retention, now_ms)
        for partition, paths in sorted(files.items())
    ]
    if not tasks:
        return {}
    found = spark.sparkContext.parallelize(tasks, len(tasks)).map(partition_cut).collect()
    return {partition: cut for partition, cut in found if cut is not None}
