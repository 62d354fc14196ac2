"""Compaction plans built and delivered by Spark tasks (the Spark executor of log compaction,
`jobs/compact.py`).

A partition's plan is the latest offset of each key in its dirty range. The keys are
aggregated by Spark (`groupBy(topic, partition, key).max(offset)`), then grouped by
partition (`applyInArrow`): the task that holds a partition's keys sorts them into the plan
and POSTs it to every replica's broker itself. The driver receives only each replica's
answer; no plan, and no key, passes through it.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

if TYPE_CHECKING:
    import httpx
    from pyspark.sql import SparkSession

    from loglake.spark.job_cluster import ClusterAccess

log = logging.getLogger(__name__)

# Answers a replica gives while it cannot take the plan yet (not caught up, being cleaned).
RETRIABLE_KAFKA_ERRORS = {"NOT_ENOUGH_REPLICAS", "REBALANCE_IN_PROGRESS", "NOT_LEADER_OR_FOLLOWER"}
_PLAN_COLUMNS = "key binary, topic string, partition int, offset bigint"
_ANSWERS = pa.schema(
    [
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("broker_id", pa.int32()),
        ("keys", pa.int64()),
        ("answer", pa.string()),
    ]
)


@dataclass(frozen=True)
class DirtyRange:
    """A partition's dirty part [start, end) and the brokers of its replicas."""

    topic: str
    partition: int
    start: int
    end: int
    replicas: tuple[int, ...]


def send_plan(
    http: httpx.Client, url: str, r: DirtyRange, plan: pa.Table, now_ms: int, timeout_s: float
) -> dict[str, Any]:
    """POST the plan to one replica's broker, retrying while it asks to."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, plan.schema) as writer:
        writer.write_table(plan)
    body = sink.getvalue().to_pybytes()
    deadline = time.monotonic() + timeout_s
    while True:
        answer = http.post(
            f"{url}/admin/compaction/{r.topic}/{r.partition}",
            params={"end_offset": r.end, "now_ms": now_ms},
            content=body,
            headers={"content-type": "application/vnd.apache.arrow.stream"},
            timeout=max(30.0, timeout_s),
        )
        if answer.status_code == 200:
            return answer.json()
        kafka_error = answer.json().get("kafka_error") if answer.content else None
        if kafka_error not in RETRIABLE_KAFKA_ERRORS or time.monotonic() > deadline:
            raise RuntimeError(f"{url} refused the plan of {r.topic}-{r.partition}: {answer.status_code} {answer.text}")
        time.sleep(0.2)


def compact_ranges(
    spark: SparkSession,
    access: ClusterAccess,
    ranges: list[DirtyRange],
    brokers: dict[int, str],
    now_ms: int,
    timeout_s: float,
) -> list[dict[str, Any]]:
    """Plan every range and hand each plan to its replicas, from the tasks; every replica's
    answer (`topic`, `partition`, `keys` in the plan, and the broker's answer)."""
    from pyspark.sql import functions as F
    from pyspark.sql.pandas.types import from_arrow_schema

    import loglake.spark

    starting: dict[str, dict[str, int]] = {}
    ending: dict[str, dict[str, int]] = {}
    for r in ranges:
        starting.setdefault(r.topic, {})[str(r.partition)] = r.start
        ending.setdefault(r.topic, {})[str(r.partition)] = r.end
    # read_committed: records of aborted transactions and markers are left out, so an
    # aborted value never shadows a committed one.
    frame = loglake.spark.read_topic(
        spark,
        ",".join(sorted(starting)),
        schema=_PLAN_COLUMNS,
        startingOffsets=json.dumps(starting),
        endingOffsets=json.dumps(ending),
        **access.source_options(),
        **{"kafka.isolation.level": "read_committed"},
    )
    latest = (
        frame.where(F.col("key").isNotNull()).groupBy("topic", "partition", "key").agg(F.max("offset").alias("offset"))
    )
    # One row without a key per range: a range whose records all lack keys (or were aborted)
    # still gets its (empty) plan, which makes its replicas drop aborted records and markers.
    markers = spark.createDataFrame([(None, r.topic, r.partition, -1) for r in ranges], _PLAN_COLUMNS)
    by_partition = {(r.topic, r.partition): r for r in ranges}

    def plan_and_send(keys: pa.Table) -> pa.Table:
        r = by_partition[(keys["topic"][0].as_py(), keys["partition"][0].as_py())]
        keys = keys.filter(pc.is_valid(keys["key"]))
        plan = keys.select(["key", "offset"]).take(pc.sort_indices(keys["offset"]))
        answers = []
        with access.http_client() as http:
            for broker_id in r.replicas:
                answer = send_plan(http, brokers[broker_id], r, plan, now_ms, timeout_s)
                answers.append((r.topic, r.partition, broker_id, plan.num_rows, json.dumps(answer)))
        return pa.Table.from_pylist([dict(zip(_ANSWERS.names, a)) for a in answers], schema=_ANSWERS)

    # One task per partition at most (an explicit count, which adaptive execution keeps):
    # the plans are sent in parallel, not from one task that the small shuffle was merged into.
    rows = (
        latest.unionByName(markers)
        .repartition(len(ranges), "topic", "partition")
        .groupBy("topic", "partition")
        .applyInArrow(plan_and_send, from_arrow_schema(_ANSWERS))
        .collect()
    )
    return [
        {"topic": row.topic, "partition": row.partition, "keys": row["keys"], **json.loads(row.answer)} for row in rows
    ]
