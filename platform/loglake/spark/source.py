"""The `loglake` data source for Spark's Python Data Source API (Spark 4)."""

from __future__ import annotations

from dataclasses import replace

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)
from pyspark.sql.pandas.types import from_arrow_schema
from pyspark.sql.types import StructType

from loglake.spark.batch_reader import LoglakeBatchReader
from loglake.spark.kafka_columns import KAFKA_COLUMNS, arrow_schema, default_columns
from loglake.spark.options import OptionError, ReadOptions, parse_include_headers, parse_read_options
from loglake.spark.sink import LoglakeBatchWriter, LoglakeStreamWriter, parse_write_options
from loglake.spark.stream_reader import LoglakeStreamReader


def kafka_schema(include_headers: bool) -> StructType:
    """The columns of Spark's Kafka source, same names and types (headers with includeHeaders)."""
    return columns_schema(default_columns(include_headers))


def columns_schema(columns: tuple[str, ...]) -> StructType:
    """The Spark schema of these Kafka source columns, in this order."""
    return from_arrow_schema(arrow_schema(columns))


def selected_columns(schema: StructType) -> tuple[str, ...]:
    """The Kafka source columns a schema given to the reader asks for (any of them, in any
    order, each with its type); anything else raises OptionError naming the columns allowed."""
    allowed = columns_schema(tuple(KAFKA_COLUMNS.names))
    types = {f.name: f.dataType for f in allowed.fields}
    listing = ", ".join(f"{f.name} {f.dataType.simpleString()}" for f in allowed.fields)
    names = [f.name for f in schema.fields]
    for f in schema.fields:
        if f.name not in types:
            raise OptionError(f"schema: the loglake source has no column {f.name!r}; its columns are {listing}")
        if f.dataType != types[f.name]:
            raise OptionError(
                f"schema: column {f.name} is {types[f.name].simpleString()}, not {f.dataType.simpleString()} "
                f"(the loglake source's columns are {listing})"
            )
    if len(set(names)) < len(names) or not names:
        raise OptionError(f"schema: name each column once, at least one; the loglake source's columns are {listing}")
    return tuple(names)


def _with_schema(options: ReadOptions, schema: StructType) -> ReadOptions:
    return replace(options, columns=selected_columns(schema))


class LoglakeDataSource(DataSource):
    """`spark.read.format("loglake")` and `spark.readStream.format("loglake")`: topics as
    DataFrames with the Kafka source's schema (or any subset of its columns, with
    `.schema(...)`); `df.write` / `df.writeStream` produce to
    topics. Options are checked when the reader or writer is made, on the driver, before
    any job."""

    @classmethod
    def name(cls) -> str:
        return "loglake"

    def schema(self) -> StructType:
        return kafka_schema(parse_include_headers(self.options))

    def reader(self, schema: StructType) -> DataSourceReader:
        return LoglakeBatchReader(_with_schema(parse_read_options(self.options, streaming=False), schema))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return LoglakeStreamReader(_with_schema(parse_read_options(self.options, streaming=True), schema))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        if overwrite:
            raise OptionError("mode: a topic is appended to, never overwritten (use mode append)")
        return LoglakeBatchWriter(parse_write_options(self.options, schema, streaming=False))

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        return LoglakeStreamWriter(parse_write_options(self.options, schema, streaming=True))
