"""Compaction of topics by Spark: `python -m jobs.compact` or `spark-submit jobs/compact.py`.

    python -m jobs.compact --bootstrap-servers host:9092 --topics a,b [--admin-url http://host:8082]

For the topics whose `loglake.compaction.executor` is `spark` (others are the broker's
cleaner's; the job warns and skips them, and topics that are not compacted):

1. asks each partition's leader (over the brokers' HTTP API: their `http.listeners`, or
   `GET /cluster` of `--admin-url`)
   where its dirty part starts (`first_dirty_offset`) and where cleaning must stop
   (`first_uncleanable_offset`: the active segment, the last stable offset, as Kafka's
   cleaner never passes an open transaction, and `min.compaction.lag.ms`);
2. reads all those dirty ranges with one `loglake` DataFrame read_committed (Spark reads
   the partitions in parallel; records of aborted transactions and markers are left out,
   so an aborted value never shadows a committed one) and builds each partition's plan
   with a DataFrame aggregation: the latest offset of each key,
   `groupBy(partition, key).max(offset)` (`loglake.spark.compaction`);
3. the Spark task that holds a partition's plan (an Arrow stream of key, offset) hands it to
   every replica's broker, `POST /admin/compaction/<topic>/<partition>?end_offset=..&now_ms=..`
   (the driver receives only the answers); each broker rewrites
   its own segments with the same core as its own cleaner, so all replicas end
   byte-identical below the cleaned offset (they remove aborted records and markers by
   the same rules). A replica whose high watermark or last stable offset has not reached
   the plan's end yet answers "retry"; the job retries until `--timeout-s`.

Exit code 0 when every replica of every partition took its plan.
"""

from __future__ import annotations

import argparse
import logging
import time
from typing import TYPE_CHECKING, Any

import httpx
from loglake.spark import job_session
from loglake.spark.cluster_admin import broker_http_urls
from loglake.spark.compaction import DirtyRange, compact_ranges
from loglake.spark.job_cluster import Cluster, add_cluster_arguments, cluster_access

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger("jobs.compact")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="jobs.compact", description=__doc__.split("\n\n")[0])
    parser.add_argument("--bootstrap-servers", required=True, help="Kafka listeners of the cluster")
    parser.add_argument("--topics", required=True, help="comma-separated topics to compact")
    parser.add_argument(
        "--admin-url",
        help="HTTP API of any broker, whose GET /cluster names the others (default: each broker's "
        "http.listeners, found over the Kafka protocol)",
    )
    parser.add_argument("--timeout-s", type=float, default=120.0, help="how long to retry a replica (default 120)")
    add_cluster_arguments(parser)
    args = parser.parse_args(argv)
    args.topic_list = [t.strip() for t in args.topics.split(",") if t.strip()]
    if not args.topic_list:
        parser.error("--topics names no topic")
    args.cluster = cluster_access(parser, args)
    return args


def broker_urls(cluster: Cluster, admin_url: str | None) -> dict[int, str]:
    """Every broker's HTTP API: from `--admin-url`'s GET /cluster, else from the brokers'
    `http.listeners` (DescribeConfigs through the bootstrap servers)."""
    if admin_url is None:
        return broker_http_urls(cluster.client)
    described = cluster.http.get(f"{admin_url}/cluster")
    described.raise_for_status()
    return {b["broker_id"]: b["http"] for b in described.json()["brokers"]}


def dirty_ranges(http: httpx.Client, admin_url: str, brokers: dict[int, str], topics: list[str]) -> list[DirtyRange]:
    """Each partition's dirty part, as its leader sees it (first dirty, first uncleanable offset)."""
    ranges = []
    for topic in topics:
        described = http.get(f"{admin_url}/topics/{topic}")
        described.raise_for_status()
        doc = described.json()
        configs = doc["configs"]
        if "compact" not in configs.get("cleanup.policy", ""):
            log.warning("skipping %s: cleanup.policy is not compact", topic)
            continue
        if configs.get("loglake.compaction.executor") != "spark":
            log.warning("skipping %s: loglake.compaction.executor is not spark (the broker's cleaner has it)", topic)
            continue
        for p in doc["partitions"]:
            leader = http.get(f"{brokers[p['leader']]}/topics/{topic}/partitions/{p['partition']}")
            leader.raise_for_status()
            state = leader.json()
            start = state["compaction"]["first_dirty_offset"]
            end = state["compaction"]["first_uncleanable_offset"]
            if start is None or end is None or start >= end:
                continue
            replicas = tuple(r["broker"] for r in state["replicas"])
            ranges.append(DirtyRange(topic, p["partition"], start, end, replicas))
    return ranges


def run(spark: SparkSession, args: argparse.Namespace) -> list[dict[str, Any]]:
    """Plan and apply; returns each replica's answer."""
    now_ms = int(time.time() * 1000)
    with args.cluster.connect("loglake-compact") as cluster:
        brokers = broker_urls(cluster, args.admin_url)
        ranges = dirty_ranges(cluster.http, args.admin_url or next(iter(brokers.values())), brokers, args.topic_list)
        if not ranges:
            log.info("nothing to compact in %s", args.topic_list)
            return []
        answers = compact_ranges(spark, args.cluster, ranges, brokers, now_ms, args.timeout_s)
        by_partition = {(r.topic, r.partition): r for r in ranges}
        for answer in sorted(answers, key=lambda a: (a["topic"], a["partition"], a["broker_id"])):
            r = by_partition[(answer["topic"], answer["partition"])]
            log.info(
                "%s-%d on broker %d: %d keys, offsets %d..%d, cleaned up to %d (%d -> %d bytes)",
                r.topic,
                r.partition,
                answer["broker_id"],
                answer["keys"],
                r.start,
                r.end,
                answer["cleaned_up_to"],
                answer["bytes_read"],
                answer["bytes_written"],
            )
        return answers


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    with job_session("loglake-compact") as spark:
        run(spark, args)


if __name__ == "__main__":
    main()
