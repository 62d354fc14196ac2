"""Writing DataFrames to topics, in the shape of Spark's Kafka sink.

Columns: `value` (binary or string, required), `key` (binary or string), `topic` (string,
unless the `topic` option names one for every row; the option wins, as in Spark),
`partition` (int; null or absent: the producer's partitioner), `headers`
(array<struct<key: string, value: binary>>).

Exactly once (streaming by default; batch writes with `exactly.once=true` or a
`transactional.id.prefix`): each task writes its rows in a Kafka transaction of its own,
transactional id `<prefix>-<query id>-<partition id>` (`<prefix>-<write id>-<partition id>`
for a batch write), which Spark's driver commits only when the micro-batch (or the job)
commits. A streaming task also records the micro-batch id in its transaction, as the
offsets of a consumer group named after its transactional id, so that a micro-batch Spark
replays after a crash is recognised, task by task, and not written again. A batch write
given `txnAppId` and `txnVersion` (Delta's names for its idempotent writes) does the same
with ids `<prefix>-<txnAppId>-<partition id>` and its version for the micro-batch id: a
rerun of a version skips the tasks that committed it (so each task's rows must be the same
as the first time).

At least once (`exactly.once=false`, and batch writes by default): rows go through
confluent-kafka's idempotent producer with acks=all unless `kafka.acks` says otherwise;
other `kafka.*` options are producer configs. Like Spark's Kafka sink, a retried task
writes its rows again.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import cast

import numpy as np
import pyarrow as pa
from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage
from pyspark.sql.types import ArrayType, BinaryType, DataType, IntegerType, StringType, StructType

from loglake.partitioner import StickyPartitioner, partitions_for_keys
from loglake.record.batch import RecordRow
from loglake.record.compression import CompressionType
from loglake.security.client import SECURITY_PROPERTIES, client_security, librdkafka_properties
from loglake.spark.faults import spark_jvm_fault_point
from loglake.spark.options import OptionError, security_options
from loglake.spark.protocol_client import ProducerIdAndEpoch, ProtocolClient, TopicPartition
from loglake.spark.transactional_producer import (
    SinkProgress,
    TransactionalProducer,
    TransactionError,
    end_transaction,
)
from loglake.spark.worker_heap import prepare_worker_heap

log = logging.getLogger(__name__)

_BYTES_TYPES = (BinaryType, StringType)
_COLUMNS = ("key", "value", "topic", "partition", "headers")
# Local properties Spark's micro-batch execution sets for the jobs of a batch.
_QUERY_ID_PROPERTY = "sql.streaming.queryId"
_BATCH_ID_PROPERTY = "streaming.sql.batchId"
# A crash of the driver after the sink's commit, before Spark's commit log records the batch.
FAULT_AFTER_SINK_COMMIT = "after-sink-commit"
# A crash once a task has written its rows and progress, its transaction open.
FAULT_AFTER_TASK_WRITE = "after-task-write"
DEFAULT_TRANSACTIONAL_ID_PREFIX = "loglake-sink"
# Of the `kafka.*` options, those the exactly-once path (loglake's own client) understands.
_TRANSACTIONAL_KAFKA_OPTIONS = {
    "bootstrap.servers",
    "acks",
    "transaction.timeout.ms",
    "request.timeout.ms",
    "compression.type",
    *SECURITY_PROPERTIES,
}


@dataclass(frozen=True)
class TransactionalOptions:
    """The exactly-once path's settings. `write_id`: a batch write's own id (a streaming
    query's tasks use the query's id instead)."""

    bootstrap_servers: str
    transactional_id_prefix: str
    transaction_timeout_ms: int = 60_000
    request_timeout_ms: int = 30_000
    compression: CompressionType = CompressionType.NONE
    write_id: str = ""
    # A batch write's txnVersion: each task records it, and skips a version its id committed.
    write_version: int | None = None
    security: tuple[tuple[str, str], ...] = ()  # Kafka client properties (picklable)

    def client(self) -> ProtocolClient:
        return ProtocolClient(
            self.bootstrap_servers,
            client_id="loglake-spark-sink",
            request_timeout_ms=self.request_timeout_ms,
            security=client_security(dict(self.security)),
        )


@dataclass(frozen=True)
class WriteOptions:
    topic: str | None
    producer_config: dict[str, str] = field(default_factory=dict)
    # None: at least once, through confluent-kafka with `producer_config`.
    transactional: TransactionalOptions | None = None


def _is_headers_type(data_type: DataType) -> bool:
    if not isinstance(data_type, ArrayType) or not isinstance(data_type.elementType, StructType):
        return False
    fields = {f.name: f.dataType for f in data_type.elementType.fields}
    return (
        set(fields) == {"key", "value"}
        and isinstance(fields["key"], StringType)
        and isinstance(fields["value"], _BYTES_TYPES)
    )


def _positive_int(opts: Mapping[str, str], name: str, default: int) -> int:
    text = opts.get(name)
    if text is None:
        return default
    if not text.strip().isdigit() or int(text) <= 0:
        raise OptionError(f"{name} must be a positive integer, not {text!r}")
    return int(text)


def _transactional_options(opts: Mapping[str, str], streaming: bool) -> TransactionalOptions | None:
    """The exactly-once settings, or None for the at-least-once path: streaming queries are
    exactly once unless `exactly.once=false`; batch writes when asked (`exactly.once=true` or
    a `transactional.id.prefix`, or an idempotent batch write's `txnAppId` and `txnVersion`)."""
    flag = opts.get("exactly.once")
    if flag is not None and flag.lower() not in ("true", "false"):
        raise OptionError(f"exactly.once must be true or false, not {flag!r}")
    prefix = opts.get("transactional.id.prefix")
    app_id, version = _idempotent_write(opts, streaming)
    if flag is not None:
        exactly_once = flag.lower() == "true"
    else:
        exactly_once = streaming or prefix is not None or app_id is not None
    if not exactly_once:
        if prefix is not None or app_id is not None:
            name = "transactional.id.prefix" if prefix is not None else "txnAppId"
            raise OptionError(f"{name} is for exactly-once writes; exactly.once=false was given")
        return None
    if prefix is not None and not prefix.strip():
        raise OptionError("transactional.id.prefix must not be empty")
    kafka = {k[len("kafka.") :]: v for k, v in opts.items() if k.startswith("kafka.")}
    unknown = sorted(set(kafka) - _TRANSACTIONAL_KAFKA_OPTIONS)
    if unknown:
        raise OptionError(
            f"kafka.{unknown[0]}: exactly-once writes use loglake's own producer, which takes only "
            + ", ".join(f"kafka.{name}" for name in sorted(_TRANSACTIONAL_KAFKA_OPTIONS))
            + " (or set exactly.once=false)"
        )
    if kafka.get("acks", "all").lower() not in ("all", "-1"):
        raise OptionError(f"kafka.acks: transactions need acks=all, not {kafka['acks']!r}")
    codec = kafka.get("compression.type", "none").upper()
    if codec not in CompressionType.__members__:
        raise OptionError(f"kafka.compression.type must be none, gzip, snappy, lz4 or zstd, not {codec.lower()!r}")
    return TransactionalOptions(
        kafka["bootstrap.servers"],
        prefix or DEFAULT_TRANSACTIONAL_ID_PREFIX,
        _positive_int(kafka, "transaction.timeout.ms", TransactionalOptions.transaction_timeout_ms),
        _positive_int(kafka, "request.timeout.ms", TransactionalOptions.request_timeout_ms),
        CompressionType[codec],
        app_id or ("" if streaming else uuid.uuid4().hex),
        version,
        security_options(opts),
    )


def _idempotent_write(opts: Mapping[str, str], streaming: bool) -> tuple[str | None, int | None]:
    """`txnAppId` and `txnVersion` (Delta's names for its idempotent writes): a batch write
    whose tasks' transactional ids are `<prefix>-<txnAppId>-<partition id>`, each recording
    the version in its transaction and skipping a version it already committed."""
    app_id, version = opts.get("txnappid"), opts.get("txnversion")
    if app_id is None and version is None:
        return None, None
    if app_id is None or version is None:
        raise OptionError("txnAppId and txnVersion go together")
    if streaming:
        raise OptionError("txnAppId and txnVersion are for batch writes (a streaming query uses its query id)")
    if not app_id.strip():
        raise OptionError("txnAppId must not be empty")
    if not version.strip().isdigit():
        raise OptionError(f"txnVersion must be a non-negative integer, not {version!r}")
    return app_id, int(version)


def parse_write_options(options: Mapping[str, str], schema: StructType, *, streaming: bool) -> WriteOptions:
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
    # Spark's Kafka options (Java's names: sasl.jaas.config, ssl.truststore.location...) in librdkafka's.
    config.update(
        librdkafka_properties({k[len("kafka.") :]: v for k, v in options.items() if k.lower().startswith("kafka.")})
    )
    return WriteOptions(topic, config, _transactional_options(opts, streaming))


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


@dataclass
class TransactionalRows(WriterCommitMessage):
    """A task's open transaction for the driver to end (None: the task wrote nothing, or it
    found its micro-batch already committed by an earlier run)."""

    producer: ProducerIdAndEpoch | None
    rows: int
    replayed: bool = False


def _rows_by_partition(
    options: WriteOptions,
    batch: pa.RecordBatch,
    partition_counts: Mapping[str, int],
    sticky: StickyPartitioner,
) -> dict[TopicPartition, list[RecordRow]]:
    """The rows of one Arrow batch per target partition: the `partition` column where set,
    else murmur2 of the key (as the Java producer behind Spark's Kafka sink), else one
    partition for all unkeyed rows of the batch."""
    n = batch.num_rows
    names = batch.schema.names
    topics = [options.topic] * n if options.topic else batch.column("topic").to_pylist()
    keys = batch.column("key").to_pylist() if "key" in names else [None] * n
    values = batch.column("value").to_pylist()
    keys = [k.encode() if isinstance(k, str) else k for k in keys]
    values = [v.encode() if isinstance(v, str) else v for v in values]
    if "headers" in names:
        headers = [
            [(h["key"], h["value"].encode() if isinstance(h["value"], str) else h["value"]) for h in hs] if hs else []
            for hs in batch.column("headers").to_pylist()
        ]
    else:
        headers = [[]] * n
    explicit = batch.column("partition").to_pylist() if "partition" in names else [None] * n
    targets = np.array([-1 if p is None else p for p in explicit], dtype=np.int64)
    out: dict[TopicPartition, list[RecordRow]] = {}
    for topic in dict.fromkeys(topics):
        if topic is None:
            raise ValueError("a row has a null topic and no topic option is set")
        count = partition_counts[topic]
        rows = [i for i, t in enumerate(topics) if t == topic]
        keyed = [i for i in rows if targets[i] < 0 and keys[i] is not None]
        if keyed:
            # `keyed` holds only rows whose key is not None, so these are all bytes.
            targets[keyed] = partitions_for_keys(cast("list[bytes]", [keys[i] for i in keyed]), count)
        unkeyed = [i for i in rows if targets[i] < 0]
        if unkeyed:
            targets[unkeyed] = sticky.next_partition(count)
        for i in rows:
            if not 0 <= targets[i] < count:
                raise ValueError(f"topic {topic!r} has no partition {int(targets[i])} (it has {count})")
            out.setdefault(TopicPartition(topic, int(targets[i])), []).append((keys[i], values[i], headers[i], None))
    return out


def produce_in_transaction(options: WriteOptions, batches: Iterator[pa.RecordBatch]) -> TransactionalRows:
    """A task's rows in a transaction of its own, left open for the driver to end. In a
    streaming query, the task first looks at its group: a micro-batch it already committed
    (Spark replays the last batch when its commit log was not written) is not written again."""
    from pyspark import TaskContext

    txn = options.transactional
    assert txn is not None
    context = TaskContext.get()
    assert context is not None  # this runs in a Spark task, which always has a context
    batch_id = txn.write_version
    scope = txn.write_id
    if not scope:
        # Spark sets both on every task of a streaming micro-batch (the only case without a write_id).
        scope = cast(str, context.getLocalProperty(_QUERY_ID_PROPERTY))
        batch_id = int(cast(str, context.getLocalProperty(_BATCH_ID_PROPERTY)))
    transactional_id = f"{txn.transactional_id_prefix}-{scope}-{context.partitionId()}"
    with txn.client() as client:
        producer = TransactionalProducer(client, transactional_id, txn.transaction_timeout_ms, txn.compression)
        try:
            return _write_task(options, client, producer, batches, batch_id)
        except BaseException:
            if producer.producer is not None:
                # Left open, it would hold read_committed readers back until transaction.timeout.ms.
                try:
                    end_transaction(client, producer.producer, commit=False)
                except (TransactionError, TimeoutError, ConnectionError) as exc:
                    log.warning("abort of %s failed: %s", transactional_id, exc)
            raise


def _write_task(
    options: WriteOptions,
    client: ProtocolClient,
    producer: TransactionalProducer,
    batches: Iterator[pa.RecordBatch],
    batch_id: int | None,
) -> TransactionalRows:
    sticky = StickyPartitioner()
    counts: dict[str, int] = {}
    group_id = producer.transactional_id
    for batch in batches:
        if batch.num_rows == 0:
            continue
        if producer.producer is None:
            producer.begin()
            last = producer.last_progress(group_id) if batch_id is not None else None
            if last is not None and batch_id is not None and last.batch_id >= batch_id:
                log.info("%s: batch (or version) %d already committed, replay skipped", group_id, batch_id)
                for _ in batches:  # Spark hands every row to the writer; take them all
                    pass
                return TransactionalRows(None, 0, replayed=True)
        topics = [options.topic] if options.topic else batch.column("topic").unique().to_pylist()
        missing = [t for t in topics if t is not None and t not in counts]
        if missing:
            metadata = client.metadata(missing)
            for topic in missing:
                if topic not in metadata.leaders:
                    raise ValueError(f"topic {topic!r} does not exist")
                counts[topic] = len(metadata.leaders[topic])
        producer.send(_rows_by_partition(options, batch, counts, sticky))
    if producer.producer is None:
        return TransactionalRows(None, 0)
    if batch_id is not None:
        producer.record_progress(group_id, SinkProgress(batch_id))
        spark_jvm_fault_point(FAULT_AFTER_TASK_WRITE, batch_id)
    return TransactionalRows(producer.producer, producer.records)


def end_transactions(options: WriteOptions, messages: list[WriterCommitMessage | None], commit: bool) -> None:
    """End the tasks' transactions: commit each (a failure raises: Spark then fails the
    batch, and the batch is replayed when the query restarts), or abort what can be."""
    results = [m for m in messages if isinstance(m, TransactionalRows)]
    replayed = sum(m.replayed for m in results)
    if replayed:
        log.info("%d tasks found their micro-batch committed already (a replay) and wrote nothing", replayed)
    producers = [m.producer for m in results if m.producer is not None]
    if not producers:
        return
    assert options.transactional is not None
    with options.transactional.client() as client:
        for producer in producers:
            if commit:
                end_transaction(client, producer, commit=True)
                continue
            try:
                end_transaction(client, producer, commit=False)
            except (TransactionError, TimeoutError, ConnectionError) as exc:
                # The next InitProducerId of the id, or transaction.timeout.ms, aborts it.
                log.warning("abort of %s failed: %s", producer.transactional_id, exc)


def write_rows(options: WriteOptions, batches: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
    prepare_worker_heap()
    if options.transactional is None:
        return produce_batches(options, batches)
    return produce_in_transaction(options, batches)


class LoglakeBatchWriter(DataSourceArrowWriter):
    def __init__(self, options: WriteOptions) -> None:
        self.options = options

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        return write_rows(self.options, iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        end_transactions(self.options, messages, commit=True)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        end_transactions(self.options, messages, commit=False)


class LoglakeStreamWriter(DataSourceStreamArrowWriter):
    def __init__(self, options: WriteOptions) -> None:
        self.options = options

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        return write_rows(self.options, iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Exactly once: commit every task's transaction (at least once: every row was
        acknowledged in its task already)."""
        end_transactions(self.options, messages, commit=True)
        spark_jvm_fault_point(FAULT_AFTER_SINK_COMMIT, batchId)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Exactly once: abort the tasks' transactions (at least once: produced records
        cannot be taken back, as with Spark's Kafka sink)."""
        end_transactions(self.options, messages, commit=False)
