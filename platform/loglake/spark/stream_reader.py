"""Streaming reads: offsets are a per-partition JSON map in the query's checkpoint.

Spark runs this reader in one long-lived Python process per query on the driver:
initialOffset → (latestOffset → partitions → tasks read → commit) per micro-batch. Each
latestOffset looks at the topics again, so partitions added to a topic and new topics
matching subscribePattern join the next micro-batch, read from their earliest offset.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow

from loglake.spark.batch_reader import OffsetRangePartition, read_partition
from loglake.spark.group_offsets import commit_offsets
from loglake.spark.lake import split_at_lakes
from loglake.spark.offset_ranges import (
    OffsetRange,
    connect,
    discover_partitions,
    list_offsets,
    report_data_loss,
    split_ranges,
    starting_offsets,
)
from loglake.spark.options import ReadOptions
from loglake.spark.protocol_client import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, ProtocolClient
from loglake.spark.stream_offsets import PartitionOffsets, from_json_map, rate_limit, to_json_map


class LoglakeStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: ReadOptions) -> None:
        self.options = options
        # With Trigger.AvailableNow: the latest offsets when the query started, never passed.
        self.available_now_target: PartitionOffsets | None = None
        self.committed_to_group: PartitionOffsets | None = None
        # Checked now, so that bad options and an unreachable cluster fail the query's start.
        with connect(options) as client:
            discover_partitions(client, options.selection)

    def initialOffset(self) -> dict:
        with connect(self.options) as client:
            partitions = discover_partitions(client, self.options.selection)
            # Only a query without a checkpoint gets here: with a group, its committed offsets.
            from_group = self.options.group_id is not None
            starts = starting_offsets(client, partitions, self.options, from_group=from_group)
        return to_json_map(starts)

    def _latest(self, client: ProtocolClient) -> PartitionOffsets:
        partitions = discover_partitions(client, self.options.selection)
        return list_offsets(client, dict.fromkeys(partitions, LATEST_TIMESTAMP))

    def prepareForTriggerAvailableNow(self) -> None:
        with connect(self.options) as client:
            self.available_now_target = self._latest(client)

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.options.max_offsets_per_trigger is None:
            return ReadAllAvailable()
        return ReadMaxRows(self.options.max_offsets_per_trigger)

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        begin = from_json_map(start)
        with connect(self.options) as client:
            self._commit_to_group(client, begin)
            if self.available_now_target is not None:
                latest = dict(self.available_now_target)
            else:
                latest = self._latest(client)
            new = [tp for tp in latest if tp not in begin]
            begin.update(list_offsets(client, dict.fromkeys(new, EARLIEST_TIMESTAMP)) if new else {})
        end = rate_limit(begin, latest, limit.max_rows) if isinstance(limit, ReadMaxRows) else latest
        # Partitions gone from the cluster keep their last offset: they are not new if they return.
        return to_json_map({**from_json_map(start), **end})

    def _commit_to_group(self, client: ProtocolClient, done: PartitionOffsets) -> None:
        """With kafka.group.id, the offsets up to which the query has processed become the group's.

        Spark asks for the latest offset right after a micro-batch completes (and then at each
        trigger), with that batch's end as `start`; it calls commit() only once a further batch
        has data, so an availableNow query's last batch would never reach the group that way.
        """
        if self.options.group_id is None or done == self.committed_to_group:
            return
        commit_offsets(client, self.options.group_id, done)
        self.committed_to_group = done

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        begin, until = from_json_map(start), from_json_map(end)
        new = [tp for tp in until if tp not in begin]
        if new:
            with connect(self.options) as client:
                begin.update(list_offsets(client, dict.fromkeys(new, EARLIEST_TIMESTAMP)))
        ranges = []
        for tp, stop in until.items():
            if stop < begin[tp]:
                report_data_loss(
                    self.options.fail_on_data_loss,
                    f"{tp.topic}-{tp.partition} went back from offset {begin[tp]} to {stop} (recreated or truncated)",
                )
                continue
            ranges.append(OffsetRange(tp.topic, tp.partition, begin[tp], stop))
        ranges = split_ranges(ranges, self.options.min_partitions, self.options.max_records_per_partition)
        with connect(self.options) as client:
            return split_at_lakes(client, ranges, OffsetRangePartition)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_partition(self.options, partition)
