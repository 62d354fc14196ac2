"""The lake: a topic's tiered records in its Delta table, read as part of the topic.

A topic with `remote.storage.enable=true` has its old segments copied by `jobs/tier.py`
into the Delta table `<rsm.config.lake.root>/<topic>` (a broker config, found with
DescribeConfigs), with the source's columns plus `date` and `aborted` (the record belongs
to an aborted transaction: the lake keeps what a read_uncommitted reader of the log sees,
and read_committed reads of the lake leave those rows out), partitioned by partition and
date. Only offsets below the last stable offset are tiered, so every row's fate is known. Each partition's copy is committed with a Delta app transaction whose id names the
partition and whose version is the end (exclusive) of what is in the table, so the table
itself says how far each partition is tiered. The broker deletes local segments only
below that, so the lake [lake start, tiered end) and the log [log start, high watermark)
meet or overlap, never leave a gap.

Reads: `earliest` of a tiered partition is the lake's first offset (its first row that
retention has not expired), and any offset range is cut at the lake part of a Delta
version pinned on the driver: within it, read from that version's files, outside it from
the broker. No offset is read twice or skipped.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable, QueryBuilder
from pyspark.sql.datasource import InputPartition

from loglake.spark.arrow_decoder import ABORTED_FLAG
from loglake.spark.cluster_admin import BROKER_RESOURCE, TOPIC_RESOURCE, describe_configs
from loglake.spark.kafka_columns import arrow_schema
from loglake.spark.protocol_client import ProtocolClient, TopicPartition

LAKE_ROOT_CONFIG = "rsm.config.lake.root"
# Per row: the record belongs to an aborted transaction (read_committed readers skip it).
ABORTED_COLUMN = ABORTED_FLAG
REMOTE_STORAGE_CONFIG = "remote.storage.enable"
DATE_COLUMN = "date"
PARTITION_COLUMNS = ["partition", DATE_COLUMN]
# Reader features whose tables a plain read of the Parquet files would read wrongly.
UNSCANNABLE_FEATURES = frozenset({"deletionVectors", "columnMapping"})


TIER_APP_PREFIX = "loglake-tier"


def tier_app_id(topic: str, partition: int) -> str:
    """The Delta app transaction id of one partition's copy (its version: the tiered end);
    the lake writer's `app_id(TIER_APP_PREFIX, topic, partition)`."""
    return f"{TIER_APP_PREFIX}:{topic}:{partition}"


def table_path(lake_root: str, topic: str) -> str:
    return f"{lake_root.rstrip('/')}/{topic}"


def lake_root(client: ProtocolClient) -> str | None:
    """The cluster's lake root (`rsm.config.lake.root` of a broker), None if not set."""
    metadata = client.metadata_cache or client.metadata([])
    broker_id, address = min(metadata.brokers.items())
    return describe_configs(client, BROKER_RESOURCE, str(broker_id), [LAKE_ROOT_CONFIG], address).get(LAKE_ROOT_CONFIG)


def remote_storage_enabled(client: ProtocolClient, topic: str) -> bool:
    value = describe_configs(client, TOPIC_RESOURCE, topic, [REMOTE_STORAGE_CONFIG]).get(REMOTE_STORAGE_CONFIG)
    return (value or "false").lower() == "true"


@dataclass(frozen=True)
class Lake:
    """One topic's table at a pinned version: per partition, the offsets it holds, [start, end)."""

    table: str
    version: int
    extents: dict[int, tuple[int, int]]

    @classmethod
    def load(cls, table: str) -> Lake | None:
        if not DeltaTable.is_deltatable(table):
            return None
        dt = DeltaTable(table)
        files = pa.table(dt.get_add_actions(flatten=True))
        starts: dict[int, int] = {}
        if files.num_rows:
            grouped = files.group_by("partition.partition").aggregate([("min.offset", "min")])
            starts = dict(zip(grouped["partition.partition"].to_pylist(), grouped["min.offset_min"].to_pylist()))
        extents = {}
        for partition, start in starts.items():
            end = dt.transaction_version(tier_app_id(_topic_of(table), partition))
            if end is not None and start < end:
                extents[partition] = (start, end)
        return cls(table, dt.version(), extents)


def _topic_of(table: str) -> str:
    return table.rstrip("/").rsplit("/", 1)[-1]


def lakes_for(client: ProtocolClient, topics: set[str]) -> dict[str, Lake]:
    """The lakes of the topics that have remote storage and a table."""
    tiered = [t for t in sorted(topics) if remote_storage_enabled(client, t)]
    if not tiered:
        return {}
    root = lake_root(client)
    if root is None:
        return {}
    lakes = {t: Lake.load(table_path(root, t)) for t in tiered}
    return {t: lake for t, lake in lakes.items() if lake is not None}


def with_lake_starts(client: ProtocolClient, earliest: dict[TopicPartition, int]) -> dict[TopicPartition, int]:
    """`earliest` with each tiered partition starting at its lake's first offset, where the
    lake reaches the log (a gap would make the lake's records a separate island)."""
    lakes = lakes_for(client, {tp.topic for tp in earliest})
    out = dict(earliest)
    for tp, log_start in earliest.items():
        lake = lakes.get(tp.topic)
        extent = None if lake is None else lake.extents.get(tp.partition)
        if extent is not None and extent[0] < log_start <= extent[1]:
            out[tp] = extent[0]
    return out


class LakeRangePartition(InputPartition):
    """One Spark task reading offsets [start, end) of a partition from a pinned table version."""

    def __init__(self, table: str, version: int, topic: str, partition: int, start: int, end: int) -> None:
        super().__init__((table, version, topic, partition, start, end))
        self.table, self.version = table, version
        self.topic, self.partition, self.start, self.end = topic, partition, start, end


def split_at_lakes(
    client: ProtocolClient, ranges: list, broker_partition: type[InputPartition]
) -> list[InputPartition]:
    """Input partitions for offset ranges: the part of each below its lake's tiered end
    read from the lake, the rest (`broker_partition(range)`) from the broker."""
    lakes = lakes_for(client, {r.topic for r in ranges}) if ranges else {}
    out: list[InputPartition] = []
    for r in ranges:
        lake = lakes.get(r.topic)
        extent = None if lake is None else lake.extents.get(r.partition)
        # [r.start, first) and [last, r.end) from the broker, [first, last) from the lake:
        # below the lake's start (its rows expired) the broker may still have offsets.
        first = last = r.start
        if extent is not None:
            first = min(r.end, max(r.start, extent[0]))
            last = max(first, min(r.end, extent[1]))
        if first > r.start:
            out.append(broker_partition(type(r)(r.topic, r.partition, r.start, first)))
        if last > first:
            assert lake is not None
            out.append(LakeRangePartition(lake.table, lake.version, r.topic, r.partition, first, last))
        if r.end > last:
            out.append(broker_partition(type(r)(r.topic, r.partition, last, r.end)))
    return out


def lake_part_at(client: ProtocolClient, topic: str, partition: int, start: int, end: int) -> LakeRangePartition | None:
    """The lake's latest version's part of [start, end) that begins at `start`, None if the
    lake does not hold `start` (a reader whose broker range was tiered and deleted locally
    after planning reads it from there)."""
    lake = lakes_for(client, {topic}).get(topic)
    extent = None if lake is None else lake.extents.get(partition)
    if lake is None or extent is None or not extent[0] <= start < extent[1]:
        return None
    return LakeRangePartition(lake.table, lake.version, topic, partition, start, min(end, extent[1]))


def plain_parquet_refusal(table: DeltaTable) -> str | None:
    """Why this table's Parquet files cannot be read as plain Parquet (by Spark's reader or
    pyarrow's), None if they can."""
    protocol = table.protocol()
    features = set(protocol.reader_features or ()) & UNSCANNABLE_FEATURES
    mapping = table.metadata().configuration.get("delta.columnMapping.mode", "none")
    if features:
        return f"reader features {sorted(features)}"
    if mapping != "none":
        return f"delta.columnMapping.mode={mapping}"
    return None


def read_lake_range(
    partition: LakeRangePartition, columns: Sequence[str], read_committed: bool
) -> Iterator[pa.RecordBatch]:
    """The records of the range, in offset order, as the source's `columns`; for
    read_committed, without the rows of aborted transactions (as the log reads them)."""
    schema = arrow_schema(columns)
    table = DeltaTable(partition.table, version=partition.version)
    wanted = list(dict.fromkeys([*schema.names, "offset"]))
    if plain_parquet_refusal(table) is not None:
        rows = _read_with_datafusion(table, partition, wanted, read_committed)
    else:
        # Imported here: pyarrow.dataset pulls in pandas (~0.5 CPU-s), which every Spark
        # planning worker that loads the source would pay, lake or not.
        import pyarrow.dataset as pds

        dataset = table.to_pyarrow_dataset()
        where = (
            (pds.field("partition") == partition.partition)
            & (pds.field("offset") >= partition.start)
            & (pds.field("offset") < partition.end)
        )
        if read_committed and ABORTED_COLUMN in dataset.schema.names:
            where &= pds.field(ABORTED_COLUMN).is_null() | ~pds.field(ABORTED_COLUMN)  # null: tiered before the flag
        rows = dataset.to_table(columns=wanted, filter=where)
    rows = rows.take(pc.sort_indices(rows, [("offset", "ascending")])).select(schema.names)
    yield from rows.cast(schema).to_batches(max_chunksize=65536)


def _read_with_datafusion(
    table: DeltaTable, partition: LakeRangePartition, columns: list[str], read_committed: bool
) -> pa.Table:
    """The range through delta-rs's query engine, which applies deletion vectors and column
    mapping (its pyarrow dataset refuses such tables)."""
    names = {f.name for f in table.schema().fields}
    where = (
        f'"partition" = {int(partition.partition)} '
        f'AND "offset" >= {int(partition.start)} AND "offset" < {int(partition.end)}'
    )
    if read_committed and ABORTED_COLUMN in names:
        where += f" AND ({ABORTED_COLUMN} IS NULL OR NOT {ABORTED_COLUMN})"
    select = ", ".join(f'"{c}"' for c in columns)
    result = QueryBuilder().register("lake", table).execute(f"SELECT {select} FROM lake WHERE {where}")
    # Its string and binary columns come as views, which pyarrow's take does not handle.
    return pa.table(result.read_all()).cast(arrow_schema(columns))
