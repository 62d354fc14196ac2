"""The columns of Spark's Kafka source: the one definition of their names and types.

The source reads any subset of them, in any order (`reader(schema)`); the decoder, the lake
read and `read_topic` build only the columns asked for. Arrow types here; the Spark schema is
derived from them (`loglake.spark.source.kafka_schema`).
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa

HEADERS_TYPE = pa.list_(pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())]))

KAFKA_COLUMNS = pa.schema(
    [
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("offset", pa.int64()),
        pa.field("timestamp", pa.timestamp("us", tz="UTC")),
        pa.field("timestampType", pa.int32()),
        # only with includeHeaders=true in the default schema
        pa.field("headers", HEADERS_TYPE),
    ]
)
HEADERS_COLUMN = "headers"


def default_columns(include_headers: bool) -> tuple[str, ...]:
    """The source's columns when no schema is given: all, headers only with includeHeaders."""
    return tuple(n for n in KAFKA_COLUMNS.names if include_headers or n != HEADERS_COLUMN)


def arrow_schema(columns: Sequence[str]) -> pa.Schema:
    """The Arrow schema of these Kafka source columns, in this order."""
    return pa.schema([KAFKA_COLUMNS.field(name) for name in columns])
