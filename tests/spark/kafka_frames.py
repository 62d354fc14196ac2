"""Synthetic records in the schema of Spark's Kafka source, as Arrow tables (no broker needed).

Record i of a partition has offset i, key `k<i>`, value `{"n": <i>, "word": "w<i>"}` and a
timestamp i seconds after `BASE_TIMESTAMP`, so any (topic, partition, offset) says what its row
must hold.
"""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
from loglake.spark.kafka_columns import KAFKA_COLUMNS

BASE_TIMESTAMP = dt.datetime(2026, 11, 23, 23, 59, 0, tzinfo=dt.UTC)


def kafka_records(topic: str, partition: int, offsets: range) -> pa.Table:
    """Records `offsets` of one partition, headers included (one `h` header per record)."""
    return pa.table(
        {
            "key": [f"k{i}".encode() for i in offsets],
            "value": [f'{{"n": {i}, "word": "w{i}"}}'.encode() for i in offsets],
            "topic": [topic] * len(offsets),
            "partition": [partition] * len(offsets),
            "offset": list(offsets),
            "timestamp": [BASE_TIMESTAMP + dt.timedelta(seconds=i) for i in offsets],
            "timestampType": [0] * len(offsets),
            "headers": [[{"key": "h", "value": str(i).encode()}] for i in offsets],
        },
        schema=KAFKA_COLUMNS,
    )


def concat(*tables: pa.Table) -> pa.Table:
    return pa.concat_tables(tables)
