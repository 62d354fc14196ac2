"""Batch reads: ranges planned once on the driver, one Spark task per range."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import replace

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, InputPartition

from loglake.protocol import IsolationLevel
from loglake.spark.group_offsets import commit_offsets
from loglake.spark.lake import LakeRangePartition, lake_part_at, read_lake_range, split_at_lakes
from loglake.spark.offset_ranges import DataLossError, OffsetRange, connect, plan_batch
from loglake.spark.options import ReadOptions
from loglake.spark.range_reader import read_range
from loglake.spark.worker_heap import prepare_worker_heap


class OffsetRangePartition(InputPartition):
    """One Spark task: an offset range of one topic partition."""

    def __init__(self, offset_range: OffsetRange) -> None:
        super().__init__(offset_range)
        self.offset_range = offset_range


def read_partition(options: ReadOptions, partition: InputPartition) -> Iterator[pa.RecordBatch]:
    prepare_worker_heap()
    if isinstance(partition, LakeRangePartition):
        return read_lake_range(partition, options.columns, _read_committed(options))
    if not isinstance(partition, OffsetRangePartition):
        return iter(())  # nothing to read: Spark still runs one task, with a None partition
    return read_broker_range(options, partition.offset_range)


def _read_committed(options: ReadOptions) -> bool:
    return options.isolation_level == IsolationLevel.READ_COMMITTED


def read_broker_range(options: ReadOptions, offset_range: OffsetRange) -> Iterator[pa.RecordBatch]:
    """The range from the broker, except what the broker no longer has because it was
    tiered (and deleted locally) after the read was planned: that comes from the lake's
    latest version. Only a loss that the lake does not cover goes to failOnDataLoss."""
    strict = replace(options, fail_on_data_loss=True)
    offset = offset_range.start
    while offset < offset_range.end:
        try:
            for decoded in read_range(strict, replace(offset_range, start=offset)):
                yield decoded.batch
                offset = decoded.next_offset
            return
        except DataLossError:
            with connect(options) as client:
                lake_part = lake_part_at(client, offset_range.topic, offset_range.partition, offset, offset_range.end)
            if lake_part is None:
                # Really gone: read again with the query's own failOnDataLoss.
                yield from (decoded.batch for decoded in read_range(options, replace(offset_range, start=offset)))
                return
            yield from read_lake_range(lake_part, options.columns, _read_committed(options))
            offset = lake_part.end


def read_and_commit(options: ReadOptions, partition: InputPartition) -> Iterator[pa.RecordBatch]:
    """A batch task with commitOffsets: once Spark has taken every record of the range, its
    end is committed to the group (the range is the partition's whole read)."""
    yield from read_partition(options, partition)
    if isinstance(partition, OffsetRangePartition):
        assert options.group_id is not None
        r = partition.offset_range
        with options.client() as client:
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
