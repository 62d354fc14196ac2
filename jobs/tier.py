"""Tiering: rolled segments of topics with remote.storage.enable into their Delta tables.

`python -m jobs.tier --bootstrap-servers localhost:9092 --topics orders,clicks` (or
spark-submit jobs/tier.py ...). For each partition of each topic it copies the records
from where the table ends (its Delta app transaction `loglake-tier:<topic>:<partition>`)
up to the start of the leader's active segment (rolled segments, below the high
watermark) into `<lake root>/<topic>`, all partitions of a topic in one Delta commit that
also records each partition's new end as its app transaction version. Then it tells the
leaders those ends (the tiered offsets), after which the brokers may delete the copied
segments by `local.retention.ms` / `local.retention.bytes`; finally it deletes the rows
older than the topic's retention.ms from the table.

Exactly once: a rerun starts each partition at the end the table records, so a crash
anywhere (before the commit: nothing was written; after it: the table says so) never
copies an offset twice. Run one tier job per topic at a time.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING

import httpx
from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake

from loglake.spark.application import run_application
from loglake.spark.delta_arrow import to_delta_arrow
from loglake.spark.lake import (
    DATE_COLUMN,
    PARTITION_COLUMNS,
    describe_configs,
    lake_root,
    remote_storage_enabled,
    table_path,
    tier_app_id,
)
from loglake.spark.protocol_client import ProtocolClient

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger("jobs.tier")

# LOGLAKE_FAULT=after-delta-commit ends the process right after a topic's Delta commit,
# before the tiered offsets reach the brokers (used by the failure tests).
FAULT_ENV = "LOGLAKE_FAULT"
FAULT_AFTER_DELTA_COMMIT = "after-delta-commit"
_BROKER_RESOURCE, _TOPIC_RESOURCE = 4, 2


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m jobs.tier", description=__doc__.split("\n\n")[0])
    parser.add_argument("--bootstrap-servers", required=True, help="host:port[,host:port...] of loglake brokers")
    parser.add_argument("--topics", required=True, help="comma-separated topics (each with remote.storage.enable=true)")
    parser.add_argument("--lake-root", help="the lake's root path or URI (default: the brokers' rsm.config.lake.root)")
    args = parser.parse_args(argv)
    args.topics = [t.strip() for t in args.topics.split(",") if t.strip()]
    if not args.topics:
        parser.error("--topics names no topic")
    return args


@dataclass(frozen=True)
class PartitionPlan:
    partition: int
    leader_http: str
    start: int
    end: int


def _leader_http(client: ProtocolClient, broker_id: int) -> str:
    """A broker's HTTP address, from its `http.listeners` (a wildcard host means its Kafka host)."""
    address = client.metadata_cache.brokers[broker_id]
    listeners = describe_configs(client, _BROKER_RESOURCE, str(broker_id), ["http.listeners"], address)
    first = (listeners.get("http.listeners") or "").split(",")[0].strip()
    scheme, _, host_port = first.partition("://")
    host, _, port = host_port.rpartition(":")
    if not port.isdigit():
        raise RuntimeError(f"broker {broker_id} has no usable http.listeners ({first!r})")
    if host in ("", "0.0.0.0", "::", "[::]"):
        host = address[0]
    return f"{scheme or 'http'}://{host}:{port}"


def _check(response: httpx.Response) -> dict:
    if response.status_code >= 400:
        raise RuntimeError(f"{response.request.url}: {response.status_code} {response.text}")
    return response.json()


def plan_topic(client: ProtocolClient, topic: str, table: str) -> list[PartitionPlan]:
    """Per partition: from the table's recorded end (else the log start) to the leader's
    tierable end. A partition whose leader cannot say is skipped this run."""
    leaders = client.metadata([topic]).leaders.get(topic)
    if not leaders:
        raise RuntimeError(f"topic {topic!r} is not known to the cluster")
    dt = DeltaTable(table) if DeltaTable.is_deltatable(table) else None
    plans = []
    for partition, leader in sorted(leaders.items()):
        if leader < 0:
            log.warning("%s-%d has no leader now; skipped", topic, partition)
            continue
        http = _leader_http(client, leader)
        state = _check(httpx.get(f"{http}/topics/{topic}/partitions/{partition}/tiering", timeout=30))
        recorded = None if dt is None else dt.transaction_version(tier_app_id(topic, partition))
        start = state["log_start_offset"] if recorded is None else recorded
        if start < state["log_start_offset"]:
            # Only if local data went before remote storage was enabled: it cannot be copied.
            log.warning(
                "%s-%d: offsets %d..%d are gone from the log", topic, partition, start, state["log_start_offset"]
            )
            start = state["log_start_offset"]
        plans.append(PartitionPlan(partition, http, start, max(start, state["tierable_end"])))
    return plans


def copy(spark: SparkSession, bootstrap: str, topic: str, table: str, plans: list[PartitionPlan]) -> int:
    """Read the planned ranges through the loglake source and commit them with each
    partition's new end as its app transaction, in one Delta commit. Returns rows written."""
    from pyspark.sql import functions as F

    todo = [p for p in plans if p.end > p.start]
    if not todo:
        return 0
    frame = (
        spark.read.format("loglake")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("assign", json.dumps({topic: [p.partition for p in todo]}))
        .option("startingOffsets", json.dumps({topic: {str(p.partition): p.start for p in todo}}))
        .option("endingOffsets", json.dumps({topic: {str(p.partition): p.end for p in todo}}))
        .option("includeHeaders", "true")
        .load()
        # The UTC date of the record, whatever the session's time zone.
        .withColumn(DATE_COLUMN, F.date_from_unix_date(F.floor(F.unix_micros("timestamp") / 86_400_000_000)))
    )
    data = to_delta_arrow(frame)
    expected = sum(p.end - p.start for p in todo)
    if data.num_rows > expected:
        raise RuntimeError(f"{topic}: read {data.num_rows} rows for {expected} offsets")
    write_deltalake(
        table,
        data,
        mode="append",
        partition_by=PARTITION_COLUMNS,
        commit_properties=CommitProperties(
            app_transactions=[Transaction(tier_app_id(topic, p.partition), p.end) for p in todo]
        ),
    )
    if os.environ.get(FAULT_ENV) == FAULT_AFTER_DELTA_COMMIT:
        os._exit(137)  # as abrupt as kill -9
    return data.num_rows


def record_tiered_offsets(topic: str, table: str, plans: list[PartitionPlan]) -> None:
    """Tell each leader how far its partition is in the table (also what an earlier,
    crashed run committed but could not report)."""
    if not DeltaTable.is_deltatable(table):
        return
    dt = DeltaTable(table)
    for p in plans:
        end = dt.transaction_version(tier_app_id(topic, p.partition))
        if end is not None:
            url = f"{p.leader_http}/topics/{topic}/partitions/{p.partition}/tiered-offset"
            _check(httpx.post(url, json={"offset": end}, timeout=30))


def expire(client: ProtocolClient, topic: str, table: str, now_ms: int) -> int:
    """Delete the table's rows older than the topic's retention.ms (-1: none). Returns how many."""
    retention = describe_configs(client, _TOPIC_RESOURCE, topic, ["retention.ms"]).get("retention.ms")
    if retention is None or int(retention) < 0 or not DeltaTable.is_deltatable(table):
        return 0
    cutoff = datetime.fromtimestamp((now_ms - int(retention)) / 1000, tz=timezone.utc)
    metrics = DeltaTable(table).delete(f"\"timestamp\" < '{cutoff.isoformat()}'")
    return int(metrics.get("num_deleted_rows", 0))


def run(spark: SparkSession, args: argparse.Namespace) -> None:
    import loglake.spark

    loglake.spark.register(spark)
    with ProtocolClient(args.bootstrap_servers, client_id="loglake-tier") as client:
        client.metadata(args.topics)
        root = args.lake_root or lake_root(client)
        if not root:
            raise SystemExit("no lake root: set rsm.config.lake.root on the brokers or pass --lake-root")
        for topic in args.topics:
            if not remote_storage_enabled(client, topic):
                raise SystemExit(f"topic {topic!r} does not have remote.storage.enable=true")
            table = table_path(root, topic)
            plans = plan_topic(client, topic, table)
            rows = copy(spark, args.bootstrap_servers, topic, table, plans)
            record_tiered_offsets(topic, table, plans)
            expired = expire(client, topic, table, int(time.time() * 1000))
            log.info("%s: %d rows tiered into %s, %d expired rows deleted", topic, rows, table, expired)


def main(argv: list[str] | None = None) -> None:
    run_application("loglake-tier", run, parse_args(argv))


if __name__ == "__main__":
    main()
