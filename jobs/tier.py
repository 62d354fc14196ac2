"""Tiering: rolled segments of topics with remote.storage.enable into their Delta tables.

`python -m jobs.tier --bootstrap-servers localhost:9092 --topics orders,clicks` (or
spark-submit jobs/tier.py ...). For each partition of each topic it copies the records
from where the table ends (its Delta app transaction `loglake-tier:<topic>:<partition>`)
up to the start of the leader's active segment (rolled segments, below the last stable
offset: never an undecided transaction) into `<lake root>/<topic>`, every record a
read_uncommitted reader sees (markers never) with an `aborted` flag for those a
read_committed reader leaves out, all partitions of a topic in one Delta commit that
also records each partition's new end as its app transaction version. Then it tells the
leaders those ends (the tiered offsets), after which the brokers may delete the copied
segments by `local.retention.ms` / `local.retention.bytes`; finally it deletes the rows
that the topic's retention.ms / retention.bytes expire from the table (they bound lake +
log, see `loglake.spark.lake_retention`; worked out by Spark tasks, no row through the driver).

Exactly once: a rerun starts each partition at the end the table records, so a crash
anywhere (before the commit: nothing was written; after it: the table says so) never
copies an offset twice. Two runs at once: each commits on the table version it planned
against, so Delta refuses the second commit of the same app transactions, and that run
plans again.
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING

import httpx
import pyarrow as pa
from deltalake import DeltaTable
from deltalake.exceptions import CommitFailedError
from loglake.spark import job_session
from loglake.spark.cluster_admin import broker_http_url
from loglake.spark.delta_arrow import nullable_schema
from loglake.spark.job_cluster import Cluster, add_cluster_arguments, cluster_access
from loglake.spark.kafka_columns import KAFKA_COLUMNS, arrow_schema
from loglake.spark.lake import (
    ABORTED_COLUMN,
    DATE_COLUMN,
    PARTITION_COLUMNS,
    TIER_APP_PREFIX,
    lake_root,
    remote_storage_enabled,
    table_path,
    tier_app_id,
)
from loglake.spark.lake_retention import LocalLog, Retention, retention_cuts
from loglake.spark.lake_writer import (
    FAULT_AFTER_COMMIT,
    LAKE_WRITER_JAVA_OPTIONS,
    LakeConflict,
    LakeTable,
    LakeWriter,
    RoundPlan,
    TableLayout,
)
from loglake.spark.offset_ranges import OffsetRange
from loglake.spark.options import parse_read_options

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger("jobs.tier")

# LOGLAKE_FAULT=after-delta-commit ends the process right after a topic's Delta commit,
# before the tiered offsets reach the brokers (used by the failure tests).
FAULT_AFTER_DELTA_COMMIT = FAULT_AFTER_COMMIT
# Plans (and expiry deletes) tried in a row while rival jobs keep committing first.
_MAX_ATTEMPTS = 5


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m jobs.tier", description=__doc__.split("\n\n")[0])
    parser.add_argument("--bootstrap-servers", required=True, help="host:port[,host:port...] of loglake brokers")
    parser.add_argument("--topics", required=True, help="comma-separated topics (each with remote.storage.enable=true)")
    parser.add_argument("--lake-root", help="the lake's root path or URI (default: the brokers' rsm.config.lake.root)")
    add_cluster_arguments(parser)
    args = parser.parse_args(argv)
    args.topics = [t.strip() for t in args.topics.split(",") if t.strip()]
    if not args.topics:
        parser.error("--topics names no topic")
    args.cluster = cluster_access(parser, args)
    return args


@dataclass(frozen=True)
class PartitionPlan:
    partition: int
    leader_http: str
    start: int
    end: int


@dataclass(frozen=True)
class TopicPlan:
    """What one run copies of a topic, planned against `snapshot`, the table's version then
    (None: no table yet). The copy commits on top of that version, so that a rival job's
    commit in between conflicts instead of being copied again."""

    snapshot: DeltaTable | None
    partitions: list[PartitionPlan]


class TierConflict(RuntimeError):
    """Another tier job committed to the table after this one planned: plan again."""


def _check(response: httpx.Response) -> dict:
    if response.status_code >= 400:
        raise RuntimeError(f"{response.request.url}: {response.status_code} {response.text}")
    return response.json()


def leaders_http(cluster: Cluster, topic: str) -> dict[int, str]:
    """Each partition's leader's HTTP address; partitions with no leader now are left out."""
    leaders = cluster.client.metadata([topic]).leaders.get(topic)
    if not leaders:
        raise RuntimeError(f"topic {topic!r} is not known to the cluster")
    out = {}
    for partition, leader in sorted(leaders.items()):
        if leader < 0:
            log.warning("%s-%d has no leader now; skipped", topic, partition)
        else:
            out[partition] = broker_http_url(cluster.client, leader)
    return out


def tiering_state(cluster: Cluster, leader_http: str, topic: str, partition: int) -> dict:
    """The leader's `GET .../tiering`: log start, tierable end, high watermark, size, tiered offset."""
    return _check(cluster.http.get(f"{leader_http}/topics/{topic}/partitions/{partition}/tiering"))


def plan_topic(cluster: Cluster, topic: str, table: str) -> TopicPlan:
    """Per partition: from the table's recorded end (else the log start) to the leader's
    tierable end. A partition whose leader cannot say is skipped this run."""
    snapshot = tier_table(table).snapshot()
    plans = []
    for partition, http in leaders_http(cluster, topic).items():
        state = tiering_state(cluster, http, topic, partition)
        recorded = None if snapshot is None else snapshot.transaction_version(tier_app_id(topic, partition))
        start = state["log_start_offset"] if recorded is None else recorded
        if start < state["log_start_offset"]:
            # Only if local data went before remote storage was enabled: it cannot be copied.
            log.warning(
                "%s-%d: offsets %d..%d are gone from the log", topic, partition, start, state["log_start_offset"]
            )
            start = state["log_start_offset"]
        plans.append(PartitionPlan(partition, http, start, max(start, state["tierable_end"])))
    return TopicPlan(snapshot, plans)


def tier_table(table: str) -> LakeTable:
    """The topic's table as the lake writer writes it: the source's columns with headers,
    `aborted` and `date`, partitioned by partition and date."""
    schema = arrow_schema(KAFKA_COLUMNS.names)
    schema = nullable_schema(
        schema.append(pa.field(ABORTED_COLUMN, pa.bool_())).append(pa.field(DATE_COLUMN, pa.date32()))
    )
    return LakeTable(table, TableLayout(schema, tuple(PARTITION_COLUMNS)), TIER_APP_PREFIX)


def copy(spark: SparkSession, cluster: Cluster, topic: str, table: str, plan: TopicPlan) -> int:
    """Copy the planned ranges with the lake writer (Spark tasks fetch, decode with the
    aborted flag from the decoder's transaction tracking, and write Parquet) and commit them
    with each partition's new end as its app transaction, in one Delta commit on the planned
    snapshot. Returns rows written; TierConflict if a rival job committed meanwhile."""
    todo = [p for p in plan.partitions if p.end > p.start]
    if not todo:
        return 0
    # read_committed: the Fetch answers list the aborted transactions the flag needs.
    read = parse_read_options(
        {
            **cluster.access.source_options(),
            "assign": json.dumps({topic: [p.partition for p in todo]}),
            "includeHeaders": "true",
            "kafka.isolation.level": "read_committed",
        },
        streaming=False,
    )
    ranges = [OffsetRange(topic, p.partition, p.start, p.end) for p in todo]
    ends = {r.topic_partition: r.end for r in ranges}
    writer = LakeWriter(spark, tier_table(table), read)
    try:
        return writer.write_round(RoundPlan(plan.snapshot, ranges, ends)).rows
    except LakeConflict as exc:
        raise TierConflict(str(exc)) from exc


def record_tiered_offsets(cluster: Cluster, topic: str, plan: TopicPlan, copied: dict[int, int]) -> None:
    """Tell each leader how far its partition is in the table: where this run's commit (on
    the planned snapshot) ended it (`copied`), else where the planned snapshot ends it (an
    earlier run may have committed that and crashed before telling). The leaders are told
    at once: each records it durably, a store write of a few ms."""
    posts = []
    for p in plan.partitions:
        end = copied.get(p.partition)
        if end is None and plan.snapshot is not None:
            end = plan.snapshot.transaction_version(tier_app_id(topic, p.partition))
        if end is not None:
            posts.append((f"{p.leader_http}/topics/{topic}/partitions/{p.partition}/tiered-offset", end))
    if not posts:
        return
    with ThreadPoolExecutor(max_workers=min(len(posts), 8)) as pool:
        for response in pool.map(lambda post: cluster.http.post(post[0], json={"offset": post[1]}), posts):
            _check(response)


def tier_topic(
    spark: SparkSession,
    cluster: Cluster,
    topic: str,
    table: str,
    before_commit: Callable[[], None] | None = None,
) -> int:
    """Copy what is tierable now and record it with the leaders; returns rows written.
    A conflict with a rival job means it copied (some of) the range: plan again from what
    the table now says. `before_commit` runs between planning and copying (tests put a
    rival job there)."""
    for attempt in range(1, _MAX_ATTEMPTS + 1):
        plan = plan_topic(cluster, topic, table)
        if before_commit is not None:
            before_commit()
        try:
            rows = copy(spark, cluster, topic, table, plan)
        except TierConflict as exc:
            if attempt == _MAX_ATTEMPTS:
                raise
            log.info("%s; planning again (attempt %d)", exc, attempt + 1)
            continue
        record_tiered_offsets(cluster, topic, plan, {p.partition: p.end for p in plan.partitions if p.end > p.start})
        return rows
    raise AssertionError("unreachable")


def expire(spark: SparkSession, cluster: Cluster, topic: str, table: str, now_ms: int) -> int:
    """Delete the table's rows that the topic's retention.ms / retention.bytes expire
    (whole history: lake + local log). Returns how many rows went. Each partition's cut is
    worked out by a Spark task that reads that partition's files (`retention_cuts`): no row
    passes through the driver. A rival job's commit meanwhile makes delta-rs refuse the
    delete: it is worked out again."""
    retention = Retention.of(cluster, topic)
    if (retention.ms < 0 and retention.bytes < 0) or not DeltaTable.is_deltatable(table):
        return 0
    for attempt in range(1, _MAX_ATTEMPTS + 1):
        dt = DeltaTable(table)
        logs = {}
        for partition, http in leaders_http(cluster, topic).items():
            state = tiering_state(cluster, http, topic, partition)
            logs[partition] = LocalLog(state["log_start_offset"], state["size"])
        cuts = retention_cuts(spark, dt, table, logs, retention, now_ms)
        if not cuts:
            return 0
        where = " OR ".join(f'("partition" = {p} AND "offset" < {cut})' for p, cut in sorted(cuts.items()))
        try:
            return int(dt.delete(where).get("num_deleted_rows", 0))
        except CommitFailedError as exc:
            if attempt == _MAX_ATTEMPTS:
                raise
            log.info("%s: expiry conflicted with another commit (%s); again", topic, exc)
    raise AssertionError("unreachable")


def run(spark: SparkSession, args: argparse.Namespace) -> None:
    import loglake.spark

    loglake.spark.register(spark)
    with args.cluster.connect("loglake-tier") as cluster:
        cluster.client.metadata(args.topics)
        root = args.lake_root or lake_root(cluster.client)
        if not root:
            raise SystemExit("no lake root: set rsm.config.lake.root on the brokers or pass --lake-root")
        for topic in args.topics:
            if not remote_storage_enabled(cluster.client, topic):
                raise SystemExit(f"topic {topic!r} does not have remote.storage.enable=true")
            table = table_path(root, topic)
            rows = tier_topic(spark, cluster, topic, table)
            expired = expire(spark, cluster, topic, table, int(time.time() * 1000))
            log.info("%s: %d rows tiered into %s, %d expired rows deleted", topic, rows, table, expired)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    with job_session("loglake-tier", LAKE_WRITER_JAVA_OPTIONS) as spark:
        run(spark, args)


if __name__ == "__main__":
    main()
