"""Writing DataFrames to topics, in the shape of Spark's Kafka sink.

Columns: `value` (binary or string, required), `key` (binary or string), `topic` (string,
unless the `topic` option names one for every row; the option wins, as in Spark),
`partition` (int; null or absent: the producer's partitioner), `headers`
(array<struct<key: string, value: binary>>). Rows go through confluent-kafka's idempotent
producer with acks=all unless `kafka.acks` says otherwise; other `kafka.*` options are
producer configs. Like Spark's Kafka sink, this is at-least-once: a retried task writes
its rows again.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

import pyarrow as pa
from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage
from pyspark.sql.types import ArrayType, BinaryType, DataType, IntegerType, StringType, StructType

from loglake.spark.options import OptionError

_BYTES_TYPES = (BinaryType, StringType)
_COLUMNS = ("key", "value", "topic", "partition", "headers")


@dataclass(frozen=True)
class WriteOptions:
    topic: str | None
    producer_config: dict[str, str] = field(default_factory=dict)


def _is_headers_type(data_type: DataType) -> bool:
    if not isinstance(data_type, ArrayType) or not isinstance(data_type.elementType, StructType):
        return False
    fields = {f.name: f.dataType for f in data_type.elementType.fields}
    return (
        set(fields) == {"key", "value"}
        and isinstance(fields["key"], StringType)
        and isinstance(fields["value"], _BYTES_TYPES)
    )


def parse_write_options(options: Mapping[str, str], schema: StructType) -> WriteOptions:
    """Check the options and the DataFrame's columns before any row is written."""
    opts = {k.lower(): v for k, v in options.items()}
    servers = opts.get("kafka.bootstrap.servers")
    if not servers:
        raise OptionError("kafka.bootstrap.servers must be given")
    columns = {f.name: f.dataType for f in schema.fields}
    checks = {
        "key": lambda t: isinstance(t, _BYTES_TYPES),
        "value": lambda t: isinstance(t, _BYTES_TYPES),
        "topic": lambda t: isinstance(t, StringType),
        "partition": lambda t: isinstance(t, IntegerType),
        "headers": _is_headers_type,
    }
    if "value" not in columns:
        raise OptionError("the DataFrame written needs a value column (binary or string)")
    for name, ok in checks.items():
        if name in columns and not ok(columns[name]):
            raise OptionError(f"column {name} has type {columns[name].simpleString()}, which the sink cannot write")
    topic = opts.get("topic")
    if topic is None and "topic" not in columns:
        raise OptionError("topic: no topic option and no topic column")
    # murmur2_random: keyed rows land where the Java producer behind Spark's Kafka sink puts them.
    config = {
        "bootstrap.servers": servers,
        "enable.idempotence": "true",
        "acks": "all",
        "linger.ms": "5",
        "partitioner": "murmur2_random",
    }
    config.update({k[len("kafka.") :]: v for k, v in options.items() if k.lower().startswith("kafka.")})
    return WriteOptions(topic, config)


@dataclass
class ProducedRows(WriterCommitMessage):
    rows: int


def produce_batches(options: WriteOptions, batches: Iterator[pa.RecordBatch]) -> ProducedRows:
    """Produce every row, wait for every acknowledgement; the first delivery error fails the task."""
    from confluent_kafka import KafkaException, Producer

    producer = Producer(options.producer_config)
    errors: list[object] = []

    def on_delivery(err: object, _msg: object) -> None:
        if err is not None:
            errors.append(err)

    rows = 0
    for batch in batches:
        present = [name for name in _COLUMNS if name in batch.schema.names]
        columns = {name: batch.column(name).to_pylist() for name in present}
        topics = columns.get("topic")
        for i in range(batch.num_rows):
            topic = options.topic or topics[i]  # type: ignore[index]
            if topic is None:
                raise ValueError("a row has a null topic and no topic option is set")
            kwargs = {"value": columns["value"][i], "on_delivery": on_delivery}
            if "key" in columns:
                kwargs["key"] = columns["key"][i]
            if "partition" in columns and columns["partition"][i] is not None:
                kwargs["partition"] = columns["partition"][i]
            if "headers" in columns and columns["headers"][i]:
                kwargs["headers"] = [(h["key"], h["value"]) for h in columns["headers"][i]]
            while True:
                try:
                    producer.produce(topic, **kwargs)
                    break
                except BufferError:
                    producer.poll(0.1)  # the local queue is full: let deliveries drain it
            if errors:
                raise KafkaException(errors[0])
        rows += batch.num_rows
        producer.poll(0)
    if producer.flush(60) != 0:
        raise TimeoutError("records still undelivered after 60 s")
    if errors:
        raise KafkaException(errors[0])
    return ProducedRows(rows)


class LoglakeBatchWriter(DataSourceArrowWriter):
    def __init__(self, options: WriteOptions) -> None:
        self.options = options

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        return produce_batches(self.options, iterator)


class LoglakeStreamWriter(DataSourceStreamArrowWriter):
    def __init__(self, options: WriteOptions) -> None:
        self.options = options

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        return produce_batches(self.options, iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Every row was acknowledged in its task already."""

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Produced records cannot be taken back (at-least-once, as Spark's Kafka sink)."""
