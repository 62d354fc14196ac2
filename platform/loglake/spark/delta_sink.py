"""Exactly-once writes of Kafka-shaped DataFrames into a Delta table.

A streaming query hands each micro-batch to `DeltaSink` through `foreachBatch`. The batch is
committed with a Delta app transaction (txnAppId = the query's id, txnVersion = the batch id):
Spark replays a batch whose end it did not record in its checkpoint (a crash between our Delta
commit and Spark's commit file), and the replay finds its version already recorded in the table
and writes nothing. A run without a streaming query (a batch-mode rerun of a range) has no such
identity, so only its rows whose (topic, partition, offset) the table lacks are inserted.

Two engines write the table: `deltalake` (the default, as Delta's JVM jars are not always
available: the executors write the Parquet files and the driver commits their add actions
with delta-rs, `frame_writer`; a batch-mode rerun first anti-joins its rows, in Spark, with
the keys of the table's files) and delta-spark (a MERGE), chosen when Spark has Delta's
classes on its classpath. Both write the same columns: topic, partition, offset, timestamp, key,
value (or the columns decoded from a JSON value) and headers, plus `date` when the table is
partitioned by the record's UTC date.
"""

from __future__ import annotations

import importlib.util
import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal, Protocol

from deltalake import DeltaTable, Transaction

from loglake.spark.faults import fault_point
from loglake.spark.frame_writer import KEY_COLUMNS, append_frame, insert_missing

if TYPE_CHECKING:
    import delta.tables
    from pyspark.sql import DataFrame, SparkSession

# Spark's Kafka source has no headers column unless includeHeaders is set; the table always
# has one (null then), so that its schema does not depend on a reader option.
HEADERS_TYPE_DDL = "array<struct<key: string, value: binary>>"
DATE_COLUMN = "date"

# LOGLAKE_FAULT=after-delta-commit[:<batch id>] ends the process right after a micro-batch's
# Delta commit, before Spark writes the batch's commit file: the widest window in which a crash
# makes Spark replay a batch that the table already holds (used by the failure tests).
FAULT_AFTER_DELTA_COMMIT = "after-delta-commit"

log = logging.getLogger(__name__)

Engine = Literal["auto", "deltalake", "delta-spark"]
ValueFormat = Literal["binary", "json"]


@dataclass(frozen=True)
class DeltaSinkOptions:
    """Where and how the sink writes.

    `compact_every` > 0 compacts small files after every micro-batch whose id + 1 is a multiple of
    it (batch ids survive restarts, so the period does too) and after each batch-mode run; 0 never
    compacts.
    """

    table: str
    partition_by_topic: bool = False
    partition_by_date: bool = False
    value_format: ValueFormat = "binary"
    value_schema: str | None = None
    compact_every: int = 0
    engine: Engine = "auto"

    def __post_init__(self) -> None:
        if self.value_format not in ("binary", "json"):
            raise ValueError(f"value format must be binary or json, not {self.value_format!r}")
        if (self.value_format == "json") != (self.value_schema is not None):
            raise ValueError("a value schema goes with value format json, and json needs one")
        if self.compact_every < 0:
            raise ValueError(f"compact_every must be >= 0, not {self.compact_every}")
        if self.engine not in ("auto", "deltalake", "delta-spark"):
            raise ValueError(f"engine must be auto, deltalake or delta-spark, not {self.engine!r}")

    @property
    def partition_columns(self) -> list[str]:
        return (["topic"] if self.partition_by_topic else []) + ([DATE_COLUMN] if self.partition_by_date else [])


@dataclass(frozen=True)
class BatchOutcome:
    """What one write did: `rows_written` rows committed, or a replay skipped."""

    batch_id: int | None
    rows_written: int
    replay_skipped: bool = False
    compacted: bool = False


DELTA_EXTENSION = "io.delta.sql.DeltaSparkSessionExtension"


def delta_spark_missing(spark: SparkSession) -> str | None:
    """Why this session cannot write through delta-spark (None: it can).

    It can when Spark loads Delta's classes (the jars are on its classpath), the `delta`
    Python package is installed, and the session has Delta's SQL extension, which MERGE and
    OPTIMIZE need. Nothing is configured or downloaded here: a session set up for Delta is used.
    """
    from py4j.protocol import Py4JJavaError

    jvm = spark.sparkContext._jvm
    assert jvm is not None  # set while the session's context is running
    loader = jvm.java.lang.Thread.currentThread().getContextClassLoader()
    try:
        jvm.java.lang.Class.forName("io.delta.tables.DeltaTable", False, loader)
    except Py4JJavaError:  # the JVM's ClassNotFoundException
        return "Delta's jars are not on Spark's classpath (io.delta.tables.DeltaTable not found)"
    if importlib.util.find_spec("delta") is None:
        return "the delta-spark Python package is not installed"
    extensions = spark.conf.get("spark.sql.extensions", "") or ""
    if DELTA_EXTENSION not in [name.strip() for name in extensions.split(",")]:
        return f"spark.sql.extensions does not name {DELTA_EXTENSION}"
    return None


def delta_spark_available(spark: SparkSession) -> bool:
    """Whether this session can write through delta-spark (see `delta_spark_missing`)."""
    return delta_spark_missing(spark) is None


def table_frame(batch: DataFrame, options: DeltaSinkOptions) -> DataFrame:
    """The batch (Spark's Kafka source schema) as the table's columns, computed in the JVM."""
    from pyspark.sql import functions as F

    if options.value_format == "json":
        assert options.value_schema is not None  # DeltaSinkOptions checks json comes with a schema
        decoded = F.from_json(F.col("value").cast("string"), options.value_schema)
        values = [decoded[name].alias(name) for name in _json_field_names(options.value_schema)]
    else:
        values = [F.col("value")]
    headers = F.col("headers") if "headers" in batch.columns else F.lit(None).cast(HEADERS_TYPE_DDL)
    frame = batch.select(*KEY_COLUMNS, "timestamp", "key", *values, headers.alias("headers"))
    if options.partition_by_date:
        # The UTC date, whatever the session's time zone: a record never moves between partitions.
        frame = frame.withColumn(
            DATE_COLUMN, F.date_from_unix_date(F.floor(F.unix_micros("timestamp") / 86_400_000_000))
        )
    return frame


def _json_field_names(ddl: str) -> list[str]:
    from pyspark.sql.types import StructType

    schema = StructType.fromDDL(ddl)
    if not isinstance(schema, StructType):
        message = f"a value schema is a list of fields ('id BIGINT, name STRING'), not {ddl!r}"
        raise ValueError(message)  # noqa: TRY004 - a bad option value, not a wrong argument type
    names = schema.fieldNames()
    clashes = sorted(set(names) & {*KEY_COLUMNS, "timestamp", "key", "headers", DATE_COLUMN})
    if clashes:
        raise ValueError(f"value schema fields clash with the table's own columns: {', '.join(clashes)}")
    return names


def committed_version(table: str, app_id: str) -> int | None:
    """The txnVersion the Delta table at `table` records for `app_id` (None: none, or no table).

    Read with delta-rs whichever engine wrote the table: the txn actions are part of the Delta
    protocol, and delta-spark has no public API for them.
    """
    return DeltaTable(table).transaction_version(app_id) if DeltaTable.is_deltatable(table) else None


class _TableEngine(Protocol):
    def append(self, frame: DataFrame, app_id: str, version: int) -> int: ...
    def insert_missing(self, frame: DataFrame) -> int: ...
    def compact(self) -> None: ...


@dataclass
class _DeltaRsEngine:
    """delta-rs: the executors write the files and the driver commits them (`frame_writer`)."""

    path: str
    partition_by: list[str]

    def _table(self) -> DeltaTable | None:
        return DeltaTable(self.path) if DeltaTable.is_deltatable(self.path) else None

    def append(self, frame: DataFrame, app_id: str, version: int) -> int:
        return append_frame(frame, self.path, self.partition_by, Transaction(app_id, version))

    def insert_missing(self, frame: DataFrame) -> int:
        return insert_missing(frame, self.path, self.partition_by)

    def compact(self) -> None:
        table = self._table()
        if table is not None:
            table.optimize.compact()


@dataclass
class _DeltaSparkEngine:
    """delta-spark: the executors write the files; the same app transaction and MERGE, in the JVM."""

    spark: SparkSession
    path: str
    partition_by: list[str]

    def _table(self) -> delta.tables.DeltaTable | None:
        from delta.tables import DeltaTable as SparkDeltaTable

        if not SparkDeltaTable.isDeltaTable(self.spark, self.path):
            return None
        return SparkDeltaTable.forPath(self.spark, self.path)

    def append(self, frame: DataFrame, app_id: str, version: int) -> int:
        writer = frame.write.format("delta").mode("append").option("txnAppId", app_id).option("txnVersion", version)
        writer.partitionBy(*self.partition_by).save(self.path)
        return self._last_commit_metric("numOutputRows")

    def insert_missing(self, frame: DataFrame) -> int:
        table = self._table()
        if table is None:
            frame.write.format("delta").mode("append").partitionBy(*self.partition_by).save(self.path)
            return self._last_commit_metric("numOutputRows")
        on = " AND ".join(f"t.`{name}` = s.`{name}`" for name in KEY_COLUMNS)
        table.alias("t").merge(frame.alias("s"), on).whenNotMatchedInsertAll().execute()
        return self._last_commit_metric("numTargetRowsInserted")

    def _last_commit_metric(self, name: str) -> int:
        from delta.tables import DeltaTable as SparkDeltaTable

        latest = SparkDeltaTable.forPath(self.spark, self.path).history(1).select("operationMetrics").first()
        assert latest is not None  # the table has just been written, so it has a commit
        metrics = latest[0]
        return int(metrics.get(name, 0))

    def compact(self) -> None:
        table = self._table()
        if table is not None:
            table.optimize().executeCompaction()


@dataclass
class DeltaWriter:
    """One Delta table, written through delta-spark when Spark has Delta's classes (`auto`)
    and through delta-rs otherwise; appends are made once per (app id, version)."""

    spark: SparkSession
    table: str
    partition_by: list[str]
    engine: Engine = "auto"
    engine_name: str = field(init=False)
    _engine: _TableEngine = field(init=False, repr=False)

    def __post_init__(self) -> None:
        engine = self.engine
        missing = None if engine == "deltalake" else delta_spark_missing(self.spark)
        if engine == "auto":
            engine = "deltalake" if missing else "delta-spark"
            if missing:
                log.info("writing %s with deltalake: %s", self.table, missing)
        elif missing:
            raise ValueError(f"engine delta-spark: {missing}")
        self.engine_name = engine
        if engine == "delta-spark":
            self._engine = _DeltaSparkEngine(self.spark, self.table, self.partition_by)
        else:
            self._engine = _DeltaRsEngine(self.table, self.partition_by)

    def append_once(self, frame: DataFrame, app_id: str, version: int) -> int | None:
        """Append `frame` in one commit that records `version` for `app_id`, unless the table
        records that version or a later one already: None then (a replay, nothing written)."""
        committed = committed_version(self.table, app_id)
        if committed is not None and version <= committed:
            return None
        return self._engine.append(frame, app_id, version)

    def insert_missing(self, frame: DataFrame) -> int:
        """Insert the rows whose (topic, partition, offset) the table lacks."""
        return self._engine.insert_missing(frame)

    def compact(self) -> None:
        self._engine.compact()


@dataclass
class DeltaSink:
    """The exactly-once writer; an instance is the `foreachBatch` function of a streaming query."""

    spark: SparkSession
    options: DeltaSinkOptions
    writer: DeltaWriter = field(init=False)

    def __post_init__(self) -> None:
        self.writer = DeltaWriter(self.spark, self.options.table, self.options.partition_columns, self.options.engine)

    @property
    def engine_name(self) -> str:
        return self.writer.engine_name

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        """`foreachBatch` entry point: the query's id comes from the thread running the batch."""
        query_id = batch.sparkSession.sparkContext.getLocalProperty("sql.streaming.queryId")
        if query_id is None:
            raise RuntimeError("DeltaSink called outside a streaming query's foreachBatch")
        self.write_batch(batch, int(batch_id), query_id)

    def write_batch(self, batch: DataFrame, batch_id: int, query_id: str) -> BatchOutcome:
        """Commit one micro-batch once: a batch id at or below the table's recorded one is a replay."""
        rows = self.writer.append_once(table_frame(batch, self.options), query_id, batch_id)
        if rows is None:
            log.info("batch %d of query %s: already committed, replay skipped", batch_id, query_id)
            return BatchOutcome(batch_id, 0, replay_skipped=True)
        log.info("batch %d of query %s: %d rows committed", batch_id, query_id, rows)
        fault_point(FAULT_AFTER_DELTA_COMMIT, batch_id)
        compacted = self.options.compact_every > 0 and (batch_id + 1) % self.options.compact_every == 0
        if compacted:
            self.compact()
        return BatchOutcome(batch_id, rows, compacted=compacted)

    def write_rerun(self, data: DataFrame) -> BatchOutcome:
        """Batch mode: insert the records whose (topic, partition, offset) the table lacks."""
        rows = self.writer.insert_missing(table_frame(data, self.options))
        if self.options.compact_every:
            self.compact()
        return BatchOutcome(None, rows, compacted=bool(self.options.compact_every))

    def compact(self) -> None:
        """Rewrite small files into larger ones (OPTIMIZE); the rows and the recorded txns stay."""
        self.writer.compact()
