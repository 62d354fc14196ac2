"""Retention of a topic's lake rows: where each partition's lake part may start now that its
retention.ms / retention.bytes (whole history: lake + local log) expire older rows.

The cut of each partition is worked out in a Spark task of its own, which reads that
partition's files of a pinned table version (only the columns the rule needs) on the
executor, in offset order and a file (or a group of interleaved files) at a time, stopping
at the cut; the driver receives one (partition, cut) pair per partition, never a row.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping
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


@dataclass(frozen=True)
class RowSpan:
    """A run of a partition's lake rows, offsets ascending: their offsets, timestamps (ms)
    and, for retention.bytes, stored sizes."""

    offsets: np.ndarray
    millis: np.ndarray
    sizes: np.ndarray | None


def retention_cut(
    offsets: pa.Array,
    timestamps_ms: pa.Array,
    sizes: pa.Array | None,
    log_start: int,
    log_size: int,
    retention: Retention,
    now_ms: int,
) -> int | None:
    """`streamed_retention_cut` of rows held as arrays."""
    span = RowSpan(
        offsets.to_numpy(zero_copy_only=False),
        timestamps_ms.to_numpy(zero_copy_only=False),
        None if sizes is None else sizes.to_numpy(zero_copy_only=False),
    )
    return streamed_retention_cut(lambda _: iter((span,)), log_start, log_size, retention, now_ms)


# A partition's rows, a run at a time, with sizes where asked (see streamed_retention_cut).
Spans = Callable[[Callable[[int], bool]], Iterator[RowSpan]]


def streamed_retention_cut(
    spans: Spans, log_start: int, log_size: int, retention: Retention, now_ms: int
) -> int | None:
    """Where a partition's lake part may start now (rows below it expired), None if nothing
    expired. `spans(sized)` yields the rows in ascending offsets, a run at a time, with their
    stored sizes in the runs `sized(i)` picks (the i-th run). For retention.bytes they are
    walked twice: every run's lake-only bytes first, then the walk to the cut, which needs
    the sizes of one run only (where the excess is covered); it stops at the cut. As Kafka's
    retention, only a leading run goes: by time, the rows before the first one not older
    than retention.ms; by size, the oldest rows that are only in the lake (below
    `log_start`) while they and the local log exceed retention.bytes."""
    excess = 0
    crossing = covered = -1  # the run where the excess is covered, and the bytes before it
    if retention.bytes >= 0:
        lake_bytes = [int(s.sizes[s.offsets < log_start].sum()) for s in spans(lambda _: True) if s.sizes is not None]
        excess = sum(lake_bytes) + log_size - retention.bytes
        before = 0
        for i, run_bytes in enumerate(lake_bytes):
            if before + run_bytes >= excess > 0:
                crossing, covered = i, before
                break
            before += run_bytes
    by_time = by_size = None  # each rule's first kept offset, once found
    time_open, size_open = retention.ms >= 0, excess > 0
    size_next = False  # the size rule keeps from the row after the last one seen
    first = last = None
    for i, span in enumerate(spans(lambda i: i == crossing)):
        if not len(span.offsets):
            continue
        if first is None:
            first = int(span.offsets[0])
        if size_next:
            by_size, size_next = int(span.offsets[0]), False
        if time_open:
            young = np.flatnonzero(span.millis >= now_ms - retention.ms)
            if len(young):
                by_time, time_open = int(span.offsets[young[0]]), False
        if size_open:
            lake = int(np.count_nonzero(span.offsets < log_start))  # a leading run: offsets ascend
            if i == crossing and span.sizes is not None:
                # The row that covers the excess goes too; the cut is the next one's offset.
                done = int(np.searchsorted(covered + np.cumsum(span.sizes[:lake]), excess))
                size_open = False
                if done + 1 < len(span.offsets):
                    by_size = int(span.offsets[done + 1])
                else:
                    size_next = True
            elif crossing < 0 and lake < len(span.offsets):  # every lake-only row goes, and no more
                by_size, size_open = int(span.offsets[lake]), False
        last = int(span.offsets[-1])
        if not (time_open or size_open or size_next):
            break
    if first is None or last is None:
        return None
    if time_open:  # every row is older than retention.ms
        by_time = last + 1
    if size_open or size_next:
        by_size = last + 1
    cut = max((c for c in (by_time, by_size) if c is not None), default=first)
    return cut if cut > first else None


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
    """One partition's lake rows to judge (pickled to an executor): its files in the pinned
    version (paths relative to `table`, in `file_groups`), its local log, the topic's retention."""

    table: str
    partition: int
    file_groups: tuple[tuple[str, ...], ...]
    log: LocalLog
    retention: Retention
    now_ms: int


def partition_cut(task: CutTask) -> tuple[int, int | None]:
    """(partition, cut) of one partition, from its files read in the task that runs this, a
    group of files at a time: a partition's lake part may be far larger than a task's memory."""
    filesystem, base = table_filesystem(task.table)

    def spans(sized: Callable[[int], bool]) -> Iterator[RowSpan]:
        for i, group in enumerate(task.file_groups):
            with_sizes = task.retention.bytes >= 0 and sized(i)
            columns = ["offset", "timestamp"] + (["key", "value", "headers"] if with_sizes else [])
            parts = []
            for path in group:
                with filesystem.open_input_file(f"{base}/{path}") as f:
                    parts.append(pq.ParquetFile(f).read(columns=columns))
            rows = pa.concat_tables(parts)
            rows = rows.take(pc.sort_indices(rows, [("offset", "ascending")]))
            millis = pc.divide(pc.cast(pc.cast(rows["timestamp"], pa.timestamp("us")), pa.int64()), 1000)
            yield RowSpan(
                rows["offset"].to_numpy(),
                millis.to_numpy(),
                record_sizes(rows).to_numpy(zero_copy_only=False) if with_sizes else None,
            )

    return task.partition, streamed_retention_cut(spans, task.log.start, task.log.size, task.retention, task.now_ms)


def file_groups(files: list[tuple[int | None, int | None, str]]) -> tuple[tuple[str, ...], ...]:
    """A partition's files (min offset, max offset, path) in offset order, grouped where their
    offsets interleave (the rows of one range split between two dates, timestamps going back
    across midnight): each group's rows sorted together come before the next group's. A file
    without offset statistics makes one group of all."""
    known: list[tuple[int, int, str]] = []
    for low, high, path in files:
        if low is None or high is None:
            return (tuple(sorted(path for _, _, path in files)),)
        known.append((low, high, path))
    groups: list[list[str]] = []
    end = -1
    for low, high, path in sorted(known):
        if groups and low <= end:
            groups[-1].append(path)
        else:
            groups.append([path])
        end = max(end, high)
    return tuple(tuple(group) for group in groups)


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
    files: dict[int, list[tuple[int | None, int | None, str]]] = defaultdict(list)
    for action in add_actions(snapshot):
        partition = action["partition.partition"]
        if partition in logs:
            files[partition].append((action.get("min.offset"), action.get("max.offset"), unquote(action["path"])))
    tasks = [
        CutTask(table, partition, file_groups(paths), logs[partition], retention, now_ms)
        for partition, paths in sorted(files.items())
    ]
    if not tasks:
        return {}
    found = spark.sparkContext.parallelize(tasks, len(tasks)).map(partition_cut).collect()
    return {partition: cut for partition, cut in found if cut is not None}
