"""The `loglake` data source for Spark's Python Data Source API (Spark 4)."""

from __future__ import annotations

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)
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

from loglake.spark.batch_reader import LoglakeBatchReader
from loglake.spark.options import OptionError, parse_include_headers, parse_read_options
from loglake.spark.sink import LoglakeBatchWriter, LoglakeStreamWriter, parse_write_options
from loglake.spark.stream_reader import LoglakeStreamReader


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


class LoglakeDataSource(DataSource):
    """`spark.read.format("loglake")` and `spark.readStream.format("loglake")`: topics as
    DataFrames with the Kafka source's schema; `df.write` / `df.writeStream` produce to
    topics. Options are checked when the reader or writer is made, on the driver, before
    any job."""

    @classmethod
    def name(cls) -> str:
        return "loglake"

    def schema(self) -> StructType:
        return kafka_schema(parse_include_headers(self.options))

    def reader(self, schema: StructType) -> DataSourceReader:
        return LoglakeBatchReader(parse_read_options(self.options, streaming=False))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return LoglakeStreamReader(parse_read_options(self.options, streaming=True))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        if overwrite:
            raise OptionError("mode: a topic is appended to, never overwritten (use mode append)")
        return LoglakeBatchWriter(parse_write_options(self.options, schema, streaming=False))

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        return LoglakeStreamWriter(parse_write_options(self.options, schema, streaming=True))
