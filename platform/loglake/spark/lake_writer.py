"""The lake writer: offset ranges of topics into a Delta table, exactly once by (topic, partition, offset).

Each (topic, partition) has a Delta app transaction in the table: `appId` =
`<prefix>:<topic>:<partition>`, `version` = the next offset to write. A round plans from those
versions, so whatever job, restart or rerun wrote a record, the table holds it once.

A round:

1. Plan (driver): read the table's snapshot, check it fits (schema, partitioning, protocol
   features; `LakeTableError` before anything is written), and take each partition's end
   from its app transaction. A table written by the query-id `DeltaSink` has none: its
   ends are derived once from its own rows (file statistics, or a scan of the files whose
   statistics cover several partitions), logged, and recorded by the round's commit.
2. Write (Spark tasks, one per range of at most `max_records_per_task` offsets): each task
   fetches its range from the partition's leader with loglake's own client and decoder,
   turns it into the table's columns in Arrow, and writes Parquet files into the table's
   directory, rolled at `target_file_bytes`. Only the add actions (path, size, partition
   values, statistics) go back to the driver.
3. Commit (driver): all add actions and every planned partition's new end in one Delta
   commit on top of the planned snapshot (delta-rs `create_write_transaction`). A rival
   round that committed any of those partitions' app transactions in between makes
   delta-rs refuse it (`LakeConflict`); the round plans again from the table. The refused
   round's files are deleted; files of a crashed round are never referenced (VACUUM
   removes them).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import random
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, cast

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as pds
import pyarrow.fs as pafs
import pyarrow.json as pajson
import pyarrow.parquet as pq
from deltalake import CommitProperties, DeltaTable, Schema, Transaction
from deltalake.exceptions import CommitFailedError, DeltaError
from deltalake.transaction import AddAction, create_table_with_add_actions

from loglake.spark.arrow_decoder import ABORTED_FLAG
from loglake.spark.delta_arrow import add_actions
from loglake.spark.faults import fault_point, spark_jvm_fault_point
from loglake.spark.kafka_columns import HEADERS_TYPE
from loglake.spark.offset_ranges import (
    OffsetRange,
    discover_partitions,
    list_offsets,
    pack_ranges,
    report_data_loss,
    split_ranges,
    starting_offsets,
)
from loglake.spark.options import ReadOptions
from loglake.spark.protocol_client import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, ProtocolClient, TopicPartition
from loglake.spark.range_reader import read_range
from loglake.spark.worker_heap import prepare_worker_heap

if TYPE_CHECKING:
    from deltalake.transaction import RemoveAction
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

SINK_APP_PREFIX = "loglake-sink"
DATE_COLUMN = "date"
# The columns a table may be partitioned by: each is constant within a file.
PARTITIONABLE = ("topic", "partition", DATE_COLUMN)
# LOGLAKE_FAULT=<point>[:<round>] ends the process (os._exit) after a round's Parquet files
# are written and before its commit, or right after its commit (crash tests).
FAULT_AFTER_FILES = "after-lake-files"
FAULT_AFTER_COMMIT = "after-delta-commit"
FAULT_EXECUTOR_MID_WRITE = "executor-mid-write"
# The JVM options of a job whose Spark work is the lake writer's (jobs/delta_sink.py,
# jobs/tier.py): its JVMs carry no record (the Python workers fetch, decode and write), so C2's
# compiles never pay back, yet in a young JVM they were most of a run's JVM CPU (0.3-0.7 of
# 0.4-0.9 CPU-s a run, measured): the JIT stops at C1, whose code is ample for scheduling tasks.
LAKE_WRITER_JAVA_OPTIONS = "-XX:TieredStopAtLevel=1"
DEFAULT_TARGET_FILE_BYTES = 128 * 1024 * 1024
DEFAULT_MAX_RECORDS_PER_TASK = 2_000_000
# The pause before planning again after a rival committed first: random, up to this
# times 2^conflicts, at most the maximum.
_CONFLICT_PAUSE_S = 0.1
_MAX_CONFLICT_PAUSE_S = 5.0
# Columns whose values are (nearly) all different in a log: written without a dictionary.
_UNIQUE_COLUMNS = frozenset({"key", "value", "offset", "timestamp"})
# Delta's statistics of strings: a prefix of at most this many characters.
_STATS_STRING_PREFIX = 32
# Table features whose tables this writer appends to correctly. Others (column mapping,
# CHECK constraints, generated or identity columns, row tracking...) ask writers for work
# that files written here do not do.
SUPPORTED_WRITER_FEATURES = frozenset({"appendOnly", "changeDataFeed", "deletionVectors", "timestampNtz", "invariants"})
SUPPORTED_READER_FEATURES = frozenset({"deletionVectors", "timestampNtz"})


class LakeTableError(ValueError):
    """The table cannot take this writer's rows (schema, partitioning, protocol features)."""


class LakeConflict(RuntimeError):
    """A rival writer committed some of the same partitions after this round planned."""


def app_id(prefix: str, topic: str, partition: int) -> str:
    """The app transaction of one partition in a table: its version is the next offset to write."""
    return f"{prefix}:{topic}:{partition}"


@dataclass(frozen=True)
class TableLayout:
    """The table's columns and partitioning, and how a decoded batch becomes its rows.

    `schema`: the table's columns (nullable). Decoded columns are taken by name; `date` is
    the UTC date of `timestamp`; `aborted` comes from the decoder's transaction tracking;
    with `json_fields`, the value is decoded as JSON into those columns instead of `value`.
    """

    schema: pa.Schema
    partition_by: tuple[str, ...]
    json_fields: pa.Schema | None = None

    def __post_init__(self) -> None:
        wrong = [c for c in self.partition_by if c not in PARTITIONABLE or c not in self.schema.names]
        if wrong:
            raise ValueError(f"cannot partition by {wrong}: partition columns are among {PARTITIONABLE}")

    @property
    def flags_aborted(self) -> bool:
        return ABORTED_FLAG in self.schema.names

    @property
    def data_schema(self) -> pa.Schema:
        """The columns in the Parquet files (partition columns are in the paths)."""
        return pa.schema([f for f in self.schema if f.name not in self.partition_by])

    def rows(self, batch: pa.RecordBatch) -> pa.Table:
        """A decoded batch (Spark's Kafka columns, plus `aborted` when flagged) as table rows."""
        columns: dict[str, pa.Array] = dict(zip(batch.schema.names, batch.columns))
        if DATE_COLUMN in self.schema.names:
            columns[DATE_COLUMN] = utc_dates(batch.column("timestamp"))
        if self.json_fields is not None:
            decoded = decode_json_values(batch.column("value"), self.json_fields)
            # flatten(), not field(): a null value's fields are null too.
            columns.update(zip(self.json_fields.names, decoded.flatten()))
        if "headers" in self.schema.names and "headers" not in columns:
            columns["headers"] = pa.nulls(batch.num_rows, HEADERS_TYPE)
        return pa.Table.from_arrays([columns[f.name] for f in self.schema], schema=self.schema)


def utc_dates(timestamps: pa.Array) -> pa.Array:
    """The UTC date of each timestamp, whatever the session's or machine's time zone."""
    return pc.cast(pc.cast(timestamps, pa.timestamp("us", tz="UTC")).cast(pa.timestamp("us")), pa.date32())


def decode_json_values(values: pa.Array, fields: pa.Schema) -> pa.StructArray:
    """Each value parsed as a JSON object into `fields` (as Spark's `from_json`: a value that
    is not such an object, or whose fields have the wrong types, gives nulls). The batch is
    parsed by Arrow as one newline-delimited buffer; a batch it refuses, record by record.
    A raw newline is only whitespace in valid JSON (strings escape it): it becomes a space."""
    struct = pa.struct(list(fields))
    n = len(values)
    parse = pajson.ParseOptions(explicit_schema=fields, unexpected_field_behavior="ignore")
    one_line = pc.replace_substring(values, "\n", " ")
    if n and values.null_count == 0:
        joined = pc.binary_join(pa.ListArray.from_arrays(pa.array([0, n], pa.int32()), one_line), b"\n")
        parsed = _parse_json(joined[0].as_buffer(), parse)
        if parsed is not None and parsed.num_rows == n:
            return pa.StructArray.from_arrays([c.combine_chunks() for c in parsed.columns], fields=list(fields))
    out = []
    for value in one_line.to_pylist():
        parsed = None if not value else _parse_json(pa.py_buffer(value), parse)
        out.append(parsed.to_pylist()[0] if parsed is not None and parsed.num_rows == 1 else None)
    return pa.array(out, struct)


def _parse_json(buf: pa.Buffer, parse: pajson.ParseOptions) -> pa.Table | None:
    try:
        return pajson.read_json(
            pa.BufferReader(buf), read_options=pajson.ReadOptions(block_size=buf.size + 1), parse_options=parse
        )
    except pa.ArrowInvalid:
        return None


# --- the table: checks and planning (driver) ---------------------------------------------


@dataclass(frozen=True)
class LakeTable:
    """A Delta table the lake writer appends to, with the app transactions of `app_prefix`."""

    path: str
    layout: TableLayout
    app_prefix: str = SINK_APP_PREFIX

    def snapshot(self) -> DeltaTable | None:
        """The table now (None: not created yet), checked against the layout."""
        if not DeltaTable.is_deltatable(self.path):
            return None
        table = DeltaTable(self.path)
        check_table(table, self.path, self.layout)
        return table

    def app_id(self, tp: TopicPartition) -> str:
        return app_id(self.app_prefix, tp.topic, tp.partition)

    def recorded_ends(
        self, snapshot: DeltaTable | None, partitions: Iterable[TopicPartition]
    ) -> dict[TopicPartition, int]:
        """Each partition's next offset to write as the table records it; partitions it has
        never held are left out. Partitions with rows but no app transaction (a table of the
        query-id sink) are taken over: their ends come from the rows, once."""
        if snapshot is None:
            return {}
        ends: dict[TopicPartition, int] = {}
        unrecorded = []
        for tp in partitions:
            version = snapshot.transaction_version(self.app_id(tp))
            if version is None:
                unrecorded.append(tp)
            else:
                ends[tp] = version
        if unrecorded:
            taken = ends_from_rows(snapshot, unrecorded)
            for tp, end in sorted(taken.items()):
                log.warning(
                    "%s: %s-%d has rows but no app transaction %s (written by the query-id sink): taken over, "
                    "the next offset is %d (its largest offset + 1)",
                    self.path,
                    tp.topic,
                    tp.partition,
                    self.app_id(tp),
                    end,
                )
            ends.update(taken)
        return ends


def check_table(table: DeltaTable, path: str, layout: TableLayout) -> None:
    """LakeTableError unless the table's protocol, schema and partitioning are the layout's."""
    protocol = table.protocol()
    if protocol.min_reader_version > 3 or protocol.min_writer_version > 7:
        raise LakeTableError(
            f"{path}: Delta protocol reader v{protocol.min_reader_version} / writer v{protocol.min_writer_version} "
            "is newer than delta-rs writes (reader 3, writer 7)"
        )
    unknown = sorted(set(protocol.writer_features or ()) - SUPPORTED_WRITER_FEATURES) + sorted(
        set(protocol.reader_features or ()) - SUPPORTED_READER_FEATURES
    )
    configuration = table.metadata().configuration
    if any(key.startswith("delta.constraints.") for key in configuration):
        unknown.append("CHECK constraints (delta.constraints.*)")
    if (configuration.get("delta.columnMapping.mode") or "none") != "none":
        unknown.append("columnMapping")
    schema_json = json.loads(table.schema().to_json())
    for f in schema_json["fields"]:
        meta = f.get("metadata") or {}
        if any(k.startswith(("delta.generationExpression", "delta.identity", "delta.invariants")) for k in meta):
            unknown.append(f"generated, identity or invariant column {f['name']!r}")
    if unknown:
        raise LakeTableError(
            f"{path}: the table needs Delta features this writer does not honour: {', '.join(unknown)}"
        )
    have = {f["name"]: f["type"] for f in schema_json["fields"]}
    want = {f["name"]: f["type"] for f in json.loads(Schema.from_arrow(layout.schema).to_json())["fields"]}
    if have != want:
        differs = sorted(
            f"{name}: table {have.get(name, 'missing')}, written {want.get(name, 'missing')}"
            for name in set(have) | set(want)
            if have.get(name) != want.get(name)
        )
        raise LakeTableError(f"{path}: the table's columns are not those written here ({'; '.join(differs)})")
    partitioned = list(table.metadata().partition_columns)
    if partitioned != list(layout.partition_by):
        raise LakeTableError(f"{path}: the table is partitioned by {partitioned}, not {list(layout.partition_by)}")


def ends_from_rows(table: DeltaTable, partitions: list[TopicPartition]) -> dict[TopicPartition, int]:
    """Largest offset + 1 of each partition in the table's rows (those without rows left
    out): from the files' statistics where a file holds one partition, else by scanning the
    files that hold several (only `topic`, `partition` and `offset` are read)."""
    wanted = set(partitions)
    actions = add_actions(table)
    ends: dict[TopicPartition, int] = {}
    to_scan = []

    def value(action: dict, column: str, bound: str) -> Any:
        return action.get(f"partition.{column}", action.get(f"{bound}.{column}"))

    for action in actions:
        topic, partition = value(action, "topic", "min"), value(action, "partition", "min")
        single = (
            topic is not None
            and partition is not None
            and topic == value(action, "topic", "max")
            and partition == value(action, "partition", "max")
            and action.get("max.offset") is not None
        )
        if not single:
            to_scan.append(action["path"])
            continue
        tp = TopicPartition(str(topic), int(partition))
        if tp in wanted:
            ends[tp] = max(ends.get(tp, 0), int(action["max.offset"]) + 1)
    if to_scan:
        filesystem, base = pafs.FileSystem.from_uri(table.table_uri)
        dataset = pds.dataset(
            [f"{base}/{path}" for path in to_scan],
            format="parquet",
            filesystem=filesystem,
            partitioning=pds.partitioning(flavor="hive"),
            partition_base_dir=base,
        )
        for batch in dataset.to_batches(columns=["topic", "partition", "offset"]):
            maxima = pa.Table.from_batches([batch]).group_by(["topic", "partition"]).aggregate([("offset", "max")])
            for topic, partition, top in zip(*(maxima[c].to_pylist() for c in ("topic", "partition", "offset_max"))):
                tp = TopicPartition(topic, int(partition))
                if tp in wanted:
                    ends[tp] = max(ends.get(tp, 0), top + 1)
    return ends


# --- the tasks: fetch, decode, write Parquet (executors) --------------------------------


@dataclass(frozen=True)
class WriteTask:
    """What one Spark task writes: `ranges` of the log into `table` (pickled to the executor)."""

    table: str
    layout: TableLayout
    read: ReadOptions
    ranges: tuple[OffsetRange, ...]
    target_file_bytes: int


@dataclass(frozen=True)
class WrittenFile:
    """One Parquet file a task wrote: its add action's fields."""

    path: str
    size: int
    partition_values: dict[str, str | None]
    modification_time: int
    stats: str
    rows: int

    def add_action(self) -> AddAction:
        return AddAction(self.path, self.size, self.partition_values, self.modification_time, True, self.stats)


@dataclass
class _ColumnStats:
    minimum: object = None
    maximum: object = None
    nulls: int = 0


@dataclass
class _OpenFile:
    relative: str
    sink: pa.NativeFile
    writer: pq.ParquetWriter
    partition_values: dict[str, str | None]
    rows: int = 0
    stats: dict[str, _ColumnStats] = field(default_factory=dict)


def _stats_kind(data_type: pa.DataType) -> bool:
    """Whether Delta keeps min/max statistics of such a column (numbers, strings, dates, times)."""
    return (
        pa.types.is_integer(data_type)
        or pa.types.is_floating(data_type)
        or pa.types.is_string(data_type)
        or pa.types.is_date(data_type)
        or pa.types.is_timestamp(data_type)
    )


def _stats_value(value: object, upper: bool) -> object:
    if isinstance(value, datetime):
        # Delta's statistics are in milliseconds: round the maximum up, so that no row is
        # above it (Kafka timestamps are milliseconds anyway).
        ms = value.replace(microsecond=value.microsecond - value.microsecond % 1000)
        if upper and ms != value:
            ms += timedelta(milliseconds=1)
        return ms.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms.microsecond // 1000:03d}Z"
    if hasattr(value, "isoformat"):
        return value.isoformat()
    return value


class FileRoller:
    """A task's open Parquet files in `table`'s directory, one per partition directory, each
    rolled at `target_file_bytes`. `write` takes rows of `layout.schema`; `close` gives the
    add actions' fields of every file written."""

    def __init__(self, table: str, layout: TableLayout, target_file_bytes: int) -> None:
        self.filesystem, self.base = table_filesystem(table)
        self.partition_by = layout.partition_by
        self.target_file_bytes = target_file_bytes
        self.schema = layout.data_schema
        # Dictionary encoding pays for columns with few values; on a log's unique columns
        # the writer would build a dictionary only to give it up (a third of the write time).
        self.dictionary_columns = [name for name in self.schema.names if name not in _UNIQUE_COLUMNS]
        self.open: dict[tuple[str | None, ...], _OpenFile] = {}
        self.done: list[WrittenFile] = []

    def write(self, rows: pa.Table) -> None:
        partition_by = self.partition_by
        if not partition_by:
            self._write_to((), {}, rows)
            return
        # topic and partition are constant in a range; only the date varies, and rarely
        # within a batch: a batch with one key is written whole, others split.
        keys = rows.select(list(partition_by)).group_by(list(partition_by)).aggregate([]).to_pylist()
        for key in keys:
            part = rows
            if len(keys) > 1:
                for name in partition_by:
                    part = part.filter(pc.equal(part[name], pa.scalar(key[name], rows.schema.field(name).type)))
            values = {name: None if key[name] is None else str(key[name]) for name in partition_by}
            self._write_to(tuple(values.values()), values, part.drop_columns(list(partition_by)))

    def _write_to(self, key: tuple[str | None, ...], values: dict[str, str | None], rows: pa.Table) -> None:
        current = self.open.get(key)
        if current is None:
            directory = "/".join(
                f"{name}={'__HIVE_DEFAULT_PARTITION__' if v is None else v}" for name, v in values.items()
            )
            relative = (directory + "/" if directory else "") + f"part-{uuid.uuid4()}.parquet"
            full = f"{self.base}/{relative}"
            self.filesystem.create_dir(full.rpartition("/")[0], recursive=True)
            sink = self.filesystem.open_output_stream(full)
            writer = pq.ParquetWriter(sink, self.schema, use_dictionary=self.dictionary_columns)
            current = _OpenFile(relative, sink, writer, values)
            self.open[key] = current
        rows = rows.select(self.schema.names).cast(self.schema)
        current.writer.write_table(rows)
        current.rows += rows.num_rows
        for name in self.schema.names:
            column = rows[name]
            stats = current.stats.setdefault(name, _ColumnStats())
            stats.nulls += column.null_count
            if _stats_kind(column.type) and column.null_count < len(column):
                bounds = pc.min_max(column).as_py()
                low, high = bounds["min"], bounds["max"]
                stats.minimum = low if stats.minimum is None else min(stats.minimum, low)
                stats.maximum = high if stats.maximum is None else max(stats.maximum, high)
        if current.sink.tell() >= self.target_file_bytes:
            self._close(key)

    def _close(self, key: tuple[str | None, ...]) -> None:
        current = self.open.pop(key)
        current.writer.close()
        current.sink.close()  # the writer closes only files it opened itself
        info = self.filesystem.get_file_info(f"{self.base}/{current.relative}")
        minimum: dict[str, object] = {}
        maximum: dict[str, object] = {}
        for name, s in current.stats.items():
            if s.minimum is None:
                continue
            if isinstance(s.minimum, str):
                minimum[name] = s.minimum[:_STATS_STRING_PREFIX]
                if len(cast(str, s.maximum)) <= _STATS_STRING_PREFIX:  # a cut maximum would be below the real one
                    maximum[name] = s.maximum
            else:
                minimum[name], maximum[name] = _stats_value(s.minimum, False), _stats_value(s.maximum, True)
        stats = {
            "numRecords": current.rows,
            "minValues": minimum,
            "maxValues": maximum,
            # A struct's null counts are per field in Delta's statistics: left out.
            "nullCount": {
                name: s.nulls
                for name, s in current.stats.items()
                if not pa.types.is_struct(self.schema.field(name).type)
            },
        }
        self.done.append(
            WrittenFile(
                current.relative,
                info.size,
                current.partition_values,
                info.mtime_ns // 1_000_000 if info.mtime_ns is not None else int(time.time() * 1000),
                json.dumps(stats),
                current.rows,
            )
        )

    def close(self) -> list[WrittenFile]:
        for key in list(self.open):
            self._close(key)
        return self.done


def write_task(task: WriteTask) -> list[WrittenFile]:
    """Fetch and decode the task's ranges and write them as Parquet files; their add actions."""
    roller = FileRoller(task.table, task.layout, task.target_file_bytes)
    first = True
    for offset_range in task.ranges:
        for decoded in read_range(task.read, offset_range, flag_aborted=task.layout.flags_aborted):
            roller.write(task.layout.rows(decoded.batch))
            if first:
                _executor_fault()
                first = False
    return roller.close()


def _executor_fault() -> None:
    """LOGLAKE_FAULT=executor-mid-write:<n>: the first attempt of Spark task n kills its
    executor (SIGKILL of the JVM) with a Parquet file half written (the cluster tests)."""
    from pyspark import TaskContext

    context = TaskContext.get()
    if context is not None and context.attemptNumber() == 0:
        spark_jvm_fault_point(FAULT_EXECUTOR_MID_WRITE, context.partitionId())


def _run_tasks(tasks: Iterable[WriteTask]) -> Iterator[WrittenFile]:
    prepare_worker_heap()
    for task in tasks:
        yield from write_task(task)


# --- a round (driver) --------------------------------------------------------------------


@dataclass(frozen=True)
class RoundPlan:
    """What a round writes: `ranges` (may be empty), and each planned partition's new end
    (recorded as its app transaction version, also where nothing is written)."""

    snapshot: DeltaTable | None
    ranges: list[OffsetRange]
    ends: dict[TopicPartition, int]


def plan_from_log(
    client: ProtocolClient,
    table: LakeTable,
    read: ReadOptions,
    snapshot: DeltaTable | None,
    targets: Mapping[TopicPartition, int] | None = None,
    limit: int | None = None,
) -> RoundPlan:
    """A round of the sink's policy: every partition the options select (an unknown topic is
    an OptionError), from the table's recorded end (a partition new to the table: from
    startingOffsets, or the group's offset) to `targets` (None: the log's end now), at most
    `limit` records in all (shared in proportion to what each partition lacks).

    Offsets retention deleted before they were sunk are data loss: with failOnDataLoss the
    round fails naming the partition and the lost range, else they are skipped (logged) and
    the partition's end recorded past them."""
    partitions = discover_partitions(client, read.selection)
    recorded = table.recorded_ends(snapshot, partitions)
    new = [tp for tp in partitions if tp not in recorded]
    starts = dict(recorded)
    if new:
        starts |= starting_offsets(client, new, read, from_group=read.group_id is not None)
    if targets is None:
        targets = list_offsets(client, dict.fromkeys(partitions, LATEST_TIMESTAMP))
    log_starts = list_offsets(client, dict.fromkeys(partitions, EARLIEST_TIMESTAMP))
    for tp in partitions:
        if starts[tp] < log_starts[tp]:
            report_data_loss(
                read.fail_on_data_loss,
                f"{table.path}: offsets {starts[tp]}..{log_starts[tp] - 1} of {tp.topic}-{tp.partition} were deleted "
                "from the log before they were written to the table",
            )
            starts[tp] = log_starts[tp]
    wanted = {tp: max(0, targets.get(tp, starts[tp]) - starts[tp]) for tp in partitions}
    total = sum(wanted.values())
    if limit is not None and total > limit:
        wanted = {tp: min(n, max(1, n * limit // total)) if n else 0 for tp, n in wanted.items()}
    ranges = [OffsetRange(tp.topic, tp.partition, starts[tp], starts[tp] + n) for tp, n in wanted.items() if n]
    return RoundPlan(snapshot, ranges, {tp: starts[tp] + wanted[tp] for tp in partitions})


@dataclass(frozen=True)
class RoundOutcome:
    rows: int
    files: int
    version: int | None
    ends: dict[TopicPartition, int]
    attempts: int


@dataclass
class LakeWriter:
    """Rounds of the lake writer on one table. A round's `plan` is the caller's policy
    (which partitions, where the log starts and ends, how much per round): it is given the
    table's snapshot and reads the recorded ends with `table.recorded_ends`."""

    spark: SparkSession
    table: LakeTable
    read: ReadOptions
    max_records_per_task: int = DEFAULT_MAX_RECORDS_PER_TASK
    target_file_bytes: int = DEFAULT_TARGET_FILE_BYTES
    rounds: int = 0

    def run_round(self, plan: Callable[[DeltaTable | None], RoundPlan]) -> RoundOutcome:
        """Plan (on the table's snapshot), write and commit; a rival's commit in between
        makes it plan again from the table, after a random pause that grows with the
        conflicts (each conflict means the rival moved the table on, so this never stops
        the writing as a whole; the pause lets one writer run ahead instead of both
        throwing work away)."""
        attempt = 1
        while True:
            planned = plan(self.table.snapshot())
            try:
                outcome = self.write_round(planned, attempt)
            except LakeConflict as exc:
                log.info("%s; planning again (attempt %d)", exc, attempt + 1)
                time.sleep(random.uniform(0, min(_CONFLICT_PAUSE_S * 2**attempt, _MAX_CONFLICT_PAUSE_S)))
                attempt += 1
                continue
            self.rounds += 1
            return outcome

    def write_round(self, planned: RoundPlan, attempt: int = 1) -> RoundOutcome:
        """Write the planned ranges and commit them on the planned snapshot (LakeConflict
        if a rival committed any of the planned partitions since)."""
        ranges = split_ranges(planned.ranges, None, self.max_records_per_task)
        slots = self.spark.sparkContext.defaultParallelism
        tasks = [
            WriteTask(self.table.path, self.table.layout, self.read, packed, self.target_file_bytes)
            for packed in pack_ranges(ranges, slots, self.max_records_per_task)
        ]
        written: list[WrittenFile] = []
        if tasks:
            self._check_not_overtaken(planned)
            filesystem, base = table_filesystem(self.table.path)
            filesystem.create_dir(base, recursive=True)
            try:
                written = self.spark.sparkContext.parallelize(tasks, len(tasks)).mapPartitions(_run_tasks).collect()
            except Exception:
                # A rival that committed these partitions meanwhile may have let the log
                # delete what a task was reading: that is a conflict, plan again.
                self._check_not_overtaken(planned)
                raise
        fault_point(FAULT_AFTER_FILES, self.rounds)
        changed = {
            tp: end
            for tp, end in planned.ends.items()
            if planned.snapshot is None or planned.snapshot.transaction_version(self.table.app_id(tp)) != end
        }
        if not written and not changed:
            return RoundOutcome(0, 0, None if planned.snapshot is None else planned.snapshot.version(), {}, attempt)
        try:
            version = self._commit(planned.snapshot, written, changed)
        except LakeConflict:
            remove_files(self.table.path, written)
            raise
        rows = sum(f.rows for f in written)
        log.info(
            "%s: version %d, %d rows in %d files, ends %s",
            self.table.path,
            version,
            rows,
            len(written),
            {f"{tp.topic}-{tp.partition}": end for tp, end in sorted(changed.items())},
        )
        fault_point(FAULT_AFTER_COMMIT, self.rounds)
        return RoundOutcome(rows, len(written), version, changed, attempt)

    def _check_not_overtaken(self, planned: RoundPlan) -> None:
        """LakeConflict if the table records other ends for the planned partitions than the
        planned snapshot did (a rival committed them): checked before the tasks run, so
        that a stale plan costs no writing."""
        if not DeltaTable.is_deltatable(self.table.path):
            return
        if planned.snapshot is None:
            raise LakeConflict(f"{self.table.path}: created by a rival writer after this round planned")
        now = DeltaTable(self.table.path)
        if now.version() == planned.snapshot.version():
            return
        for tp in planned.ends:
            app = self.table.app_id(tp)
            if now.transaction_version(app) != planned.snapshot.transaction_version(app):
                raise LakeConflict(f"{self.table.path}: a rival writer committed {tp.topic}-{tp.partition} meanwhile")

    def _commit(
        self, snapshot: DeltaTable | None, written: list[WrittenFile], ends: Mapping[TopicPartition, int]
    ) -> int:
        transactions = [Transaction(self.table.app_id(tp), end) for tp, end in sorted(ends.items())]
        return commit_files(self.table.path, self.table.layout, snapshot, written, transactions)


def commit_files(
    path: str,
    layout: TableLayout,
    snapshot: DeltaTable | None,
    written: list[WrittenFile],
    transactions: list[Transaction],
) -> int:
    """One Delta commit on `snapshot` (None: create the table) adding the files, with the app
    transactions; its version. LakeConflict when a rival committed first (delta-rs's conflict
    checker refuses the commit)."""
    properties = CommitProperties(app_transactions=transactions)
    adds = [f.add_action() for f in written]
    try:
        if snapshot is None:
            create_table_with_add_actions(
                path,
                Schema.from_arrow(layout.schema),
                adds,
                mode="error",
                partition_by=list(layout.partition_by) or None,
                commit_properties=properties,
            )
        else:
            snapshot.create_write_transaction(
                cast("list[AddAction | RemoveAction]", adds),
                mode="append",
                schema=layout.schema,
                partition_by=list(layout.partition_by) or None,
                commit_properties=properties,
            )
    except CommitFailedError as exc:
        raise LakeConflict(f"{path}: a rival writer committed first ({exc})") from exc
    except DeltaError as exc:
        if snapshot is None and DeltaTable.is_deltatable(path):
            raise LakeConflict(f"{path}: created by a rival writer meanwhile") from exc
        raise
    return DeltaTable(path).version()


def remove_files(table: str, written: Iterable[WrittenFile]) -> None:
    """Delete files a refused commit would have added (never referenced by the table)."""
    filesystem, base = table_filesystem(table)
    for f in written:
        with contextlib.suppress(FileNotFoundError):
            filesystem.delete_file(f"{base}/{f.path}")


def table_filesystem(table: str) -> tuple[pafs.FileSystem, str]:
    """The filesystem of a table's location and the table's path in it: a URI's (`s3://`,
    `gs://`, `abfss://`, `hdfs://`, `file://`; credentials as the filesystem takes them, for
    S3 the AWS variables), else the local one."""
    if "://" in table:
        return pafs.FileSystem.from_uri(table)
    return pafs.LocalFileSystem(), os.path.abspath(table)
