"""Batch reads: ranges planned once on the driver, one Spark task per range."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, InputPartition

from loglake.spark.group_offsets import commit_offsets
from loglake.spark.lake import LakeRangePartition, read_lake_range, split_at_lakes
from loglake.spark.offset_ranges import OffsetRange, connect, plan_batch
from loglake.spark.options import ReadOptions
from loglake.spark.protocol_client import ProtocolClient
from loglake.spark.range_reader import read_range


class OffsetRangePartition(InputPartition):
    """One Spark task: an offset range of one topic partition."""

    def __init__(self, offset_range: OffsetRange) -> None:
        super().__init__(offset_range)
        self.offset_range = offset_range


def read_partition(options: ReadOptions, partition: InputPartition) -> Iterator[pa.RecordBatch]:
    if isinstance(partition, LakeRangePartition):
        return read_lake_range(partition, options.include_headers)
    if not isinstance(partition, OffsetRangePartition):
        return iter(())  # nothing to read: Spark still runs one task, with a None partition
    return read_range(options, partition.offset_range)


def read_and_commit(options: ReadOptions, partition: InputPartition) -> Iterator[pa.RecordBatch]:
    """A batch task with commitOffsets: once Spark has taken every record of the range, its
    end is committed to the group (the range is the partition's whole read)."""
    yield from read_partition(options, partition)
    if isinstance(partition, OffsetRangePartition):
        assert options.group_id is not None
        r = partition.offset_range
        with ProtocolClient(options.bootstrap_servers, request_timeout_ms=options.request_timeout_ms) as client:
            commit_offsets(client, options.group_id, {r.topic_partition: r.end})


class LoglakeBatchReader(DataSourceReader):
    def __init__(self, options: ReadOptions) -> None:
        self.options = options
        # Resolved once, on the driver: every task reads a fixed range.
        self.ranges = plan_batch(options)
        with connect(options) as client:
            self._partitions = split_at_lakes(client, self.ranges, OffsetRangePartition)

    def partitions(self) -> Sequence[InputPartition]:
        return self._partitions

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if self.options.commit_offsets:
            return read_and_commit(self.options, partition)
        return read_partition(self.options, partition)
