"""The `loglake` data source for Spark's Python Data Source API (Spark 4): batch reads."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from loglake.spark.offset_ranges import OffsetRange, plan_batch
from loglake.spark.options import ReadOptions, parse_read_options
from loglake.spark.range_reader import read_range


def kafka_schema(include_headers: bool) -> StructType:
    """The columns of Spark's Kafka source, same names and types."""
    fields = [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
    ]
    if include_headers:
        header = StructType([StructField("key", StringType()), StructField("value", BinaryType())])
        fields.append(StructField("headers", ArrayType(header)))
    return StructType(fields)


class OffsetRangePartition(InputPartition):
    """One Spark task: an offset range of one topic partition."""

    def __init__(self, offset_range: OffsetRange) -> None:
        super().__init__(offset_range)
        self.offset_range = offset_range


class LoglakeDataSource(DataSource):
    """`spark.read.format("loglake")`: topics as DataFrames with the Kafka source's schema."""

    @classmethod
    def name(cls) -> str:
        return "loglake"

    def schema(self) -> StructType:
        # Parsing here makes bad options fail at load(), before any job.
        options = parse_read_options(self.options, streaming=False)
        return kafka_schema(options.include_headers)

    def reader(self, schema: StructType) -> DataSourceReader:
        return LoglakeBatchReader(parse_read_options(self.options, streaming=False))


class LoglakeBatchReader(DataSourceReader):
    def __init__(self, options: ReadOptions) -> None:
        self.options = options
        # Resolved once, on the driver: every task reads a fixed range.
        self.ranges = plan_batch(options)

    def partitions(self) -> Sequence[InputPartition]:
        return [OffsetRangePartition(r) for r in self.ranges]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, OffsetRangePartition):
            return iter(())  # nothing to read: Spark still runs one task, with a None partition
        return read_range(self.options, partition.offset_range)
