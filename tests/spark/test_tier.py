"""Tiering into Delta (jobs/tier.py) against a live broker: the copied segments leave the
broker, the table holds each tiered offset exactly once, a read from `earliest` (batch and
streaming) returns exactly what was produced across the lake/log seam, and a job killed
right after its Delta commit (LOGLAKE_FAULT) leaves nothing duplicated when rerun.
retention.ms / retention.bytes expire lake rows (a read from earliest then starts at what is
left), two jobs at once never copy a range twice, and a broker range tiered and deleted
locally after a read was planned is read from the lake."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType
from deltalake import DeltaTable

from clients.client_helpers import create_topic, make_broker, serve
from clients.tiering_helpers import TIERED, produce, state, tiering_overrides, wait_for_local_deletion
from jobs.tier import (
    FAULT_AFTER_DELTA_COMMIT,
    TierConflict,
    copy,
    expire,
    parse_args,
    plan_topic,
    run,
    tier_topic,
)
from loglake.spark.batch_reader import LoglakeBatchReader, OffsetRangePartition
from loglake.spark.job_cluster import ClusterAccess
from loglake.spark.lake import tier_app_id
from loglake.spark.options import parse_read_options
from source_helpers import REPO, job_environment

HOUR_MS = 3_600_000


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("lake")


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory, lake: Path) -> Iterator[object]:
    # Few __transaction_state partitions keep the first FindCoordinator quick.
    overrides = tiering_overrides(lake) | {"transaction.state.log.num.partitions": "2"}
    yield from serve(make_broker(tmp_path_factory.mktemp("tier") / "logs", **overrides))


def lake_offsets(lake: Path, topic: str) -> list[int]:
    return sorted(DeltaTable(str(lake / topic)).to_pyarrow_table(columns=["offset"])["offset"].to_pylist())


def read_earliest(spark, broker, topic: str, isolation: str = "read_committed") -> list[tuple[int, bytes, bytes]]:
    frame = (
        spark.read.format("loglake")
        .option("kafka.bootstrap.servers", broker.bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("kafka.isolation.level", isolation)
        .load()
    )
    return as_records(frame.select("offset", "key", "value").collect())


def as_records(rows: list) -> list[tuple[int, bytes, bytes]]:
    return sorted((r.offset, bytes(r.key), bytes(r.value)) for r in rows)


def run_job(broker, topic: str, fault: str | None = None) -> subprocess.CompletedProcess[str]:
    env = job_environment(fault)
    command = [sys.executable, "-m", "jobs.tier", "--bootstrap-servers", broker.bootstrap, "--topics", topic]
    return subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=False)


def test_tiered_segments_leave_the_broker_and_reads_span_lake_and_log(loglake_spark, broker, lake, topic):
    create_topic(broker.bootstrap, topic, config=TIERED)
    produced = produce(broker, topic, 0, 400)
    run(loglake_spark, parse_args(["--bootstrap-servers", broker.bootstrap, "--topics", topic]))

    s = wait_for_local_deletion(broker, topic)
    tiered = s["tiered_offset"]
    assert DeltaTable(str(lake / topic)).transaction_version(tier_app_id(topic, 0)) == tiered
    assert lake_offsets(lake, topic) == list(range(tiered))  # each tiered offset exactly once
    assert 0 < s["log_start_offset"] <= tiered  # the log reaches back to the lake: no gap
    log_dir = Path(broker.log_dir) / f"{topic}-0"
    assert min(int(p.name[:20]) for p in log_dir.glob("*.log")) == s["log_start_offset"]

    expected = [(offset, key, value) for offset, (key, value) in enumerate(produced)]
    assert read_earliest(loglake_spark, broker, topic) == expected

    query = (
        loglake_spark.readStream.format("loglake")
        .option("kafka.bootstrap.servers", broker.bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .load()
        .select("offset", "key", "value")
        .writeStream.format("memory")
        .queryName(f"tier_{topic.replace('-', '_')}")
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(120)
    rows = loglake_spark.sql(f"select * from tier_{topic.replace('-', '_')}").collect()
    assert as_records(rows) == expected


def test_a_job_killed_after_its_delta_commit_reruns_exactly_once(loglake_spark, broker, lake, topic):
    create_topic(broker.bootstrap, topic, config=TIERED)
    produced = produce(broker, topic, 0, 300)
    killed = run_job(broker, topic, fault=FAULT_AFTER_DELTA_COMMIT)
    assert killed.returncode == 137, killed.stdout + killed.stderr
    committed = lake_offsets(lake, topic)
    assert committed == list(range(len(committed))) and committed
    # The brokers never heard of it: nothing was deleted locally.
    assert state(broker, topic)["tiered_offset"] == 0 and state(broker, topic)["log_start_offset"] == 0

    produced += produce(broker, topic, 300, 200)
    done = run_job(broker, topic)
    assert done.returncode == 0, done.stdout + done.stderr
    s = wait_for_local_deletion(broker, topic)
    assert lake_offsets(lake, topic) == list(range(s["tiered_offset"]))
    assert s["tiered_offset"] > len(committed)  # the rerun copied what came since, once
    expected = [(offset, key, value) for offset, (key, value) in enumerate(produced)]
    assert read_earliest(loglake_spark, broker, topic) == expected


def alter_topic(broker, topic: str, **configs: str) -> None:
    entries = [
        ConfigEntry(k.replace("_", "."), v, incremental_operation=AlterConfigOpType.SET) for k, v in configs.items()
    ]
    resource = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=entries)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})  # alive until the futures are done
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(30)


def test_retention_ms_expires_lake_rows_and_earliest_starts_after_them(loglake_spark, broker, lake, topic):
    create_topic(broker.bootstrap, topic, config={**TIERED, "retention.ms": str(HOUR_MS)})
    old = produce(broker, topic, 0, 200, timestamp=int(time.time() * 1000) - 2 * HOUR_MS)
    young = produce(broker, topic, 200, 200)
    run(loglake_spark, parse_args(["--bootstrap-servers", broker.bootstrap, "--topics", topic]))

    s = wait_for_local_deletion(broker, topic)
    # The two-hour-old records went from the lake; the broker kept nothing below the tiered offset.
    assert lake_offsets(lake, topic) == list(range(len(old), s["tiered_offset"]))
    assert s["log_start_offset"] <= s["tiered_offset"]
    # earliest is the earliest record still kept, not an error (failOnDataLoss is true by default).
    assert read_earliest(loglake_spark, broker, topic) == [(200 + i, k, v) for i, (k, v) in enumerate(young)]


def test_offsets_below_an_expired_lake_part_are_read_from_the_log(loglake_spark, broker, lake, topic):
    create_topic(broker.bootstrap, topic, config={**TIERED, "retention.ms": str(HOUR_MS)})
    produced = produce(broker, topic, 0, 200, timestamp=int(time.time() * 1000) - 2 * HOUR_MS)
    produced += produce(broker, topic, 200, 200)
    table = str(lake / topic)
    with ClusterAccess(broker.bootstrap).connect("test") as cluster:
        # Copied, not yet recorded with the leader (a job between its commit and its report):
        # the broker deletes nothing, and the old rows expire from the lake only.
        assert copy(loglake_spark, cluster, topic, table, plan_topic(cluster, topic, table)) > 200
        assert expire(loglake_spark, cluster, topic, table, int(time.time() * 1000)) == 200
    tiered = DeltaTable(table).transaction_version(tier_app_id(topic, 0))
    assert lake_offsets(lake, topic) == list(range(200, tiered))
    assert state(broker, topic)["log_start_offset"] == 0
    # The log still has offsets 0..199: a read from earliest gets them from the broker.
    expected = [(offset, key, value) for offset, (key, value) in enumerate(produced)]
    assert read_earliest(loglake_spark, broker, topic) == expected


def test_retention_bytes_bounds_lake_plus_log(loglake_spark, broker, lake, topic):
    create_topic(broker.bootstrap, topic, config=TIERED)
    produced = produce(broker, topic, 0, 400)
    args = parse_args(["--bootstrap-servers", broker.bootstrap, "--topics", topic])
    run(loglake_spark, args)
    s = wait_for_local_deletion(broker, topic)
    log_start, log_size = s["log_start_offset"], s["size"]
    assert lake_offsets(lake, topic) == list(range(s["tiered_offset"]))

    # A bound that the local log alone meets, that lake + log exceed by a third of the
    # lake-only part: the job drops the fewest oldest lake rows that bring the total under it.
    sizes = [len(k) + len(v) for k, v in produced[:log_start]]
    limit = log_size + sum(sizes) - sum(sizes) // 3
    alter_topic(broker, topic, retention_bytes=str(limit))
    run(loglake_spark, args)

    dropped, total = 0, sum(sizes) + log_size
    while total > limit:
        total -= sizes[dropped]
        dropped += 1
    assert 0 < dropped < log_start
    assert lake_offsets(lake, topic) == list(range(dropped, s["tiered_offset"]))
    assert state(broker, topic)["log_start_offset"] == log_start  # the local log is local retention's
    expected = [(offset, key, value) for offset, (key, value) in enumerate(produced)][dropped:]
    assert read_earliest(loglake_spark, broker, topic) == expected


def test_two_tier_jobs_at_once_copy_each_range_once(loglake_spark, broker, lake, topic):
    create_topic(broker.bootstrap, topic, config=TIERED)
    produce(broker, topic, 0, 300)
    table = str(lake / topic)
    with ClusterAccess(broker.bootstrap).connect("test") as cluster:
        # Both plan against no table; the rival creates it and commits first.
        stale = plan_topic(cluster, topic, table)
        assert tier_topic(loglake_spark, cluster, topic, table) > 0
        with pytest.raises(TierConflict):
            copy(loglake_spark, cluster, topic, table, stale)

        # Both plan against the same version; the rival commits the same app transactions first.
        produce(broker, topic, 300, 200)
        stale = plan_topic(cluster, topic, table)
        rival_rows = []

        def rival() -> None:
            if not rival_rows:
                rival_rows.append(tier_topic(loglake_spark, cluster, topic, table))

        assert tier_topic(loglake_spark, cluster, topic, table, before_commit=rival) == 0
        assert rival_rows[0] > 0
        with pytest.raises(TierConflict):
            copy(loglake_spark, cluster, topic, table, stale)

    tiered = DeltaTable(table).transaction_version(tier_app_id(topic, 0))
    assert lake_offsets(lake, topic) == list(range(tiered))
    assert state(broker, topic)["tiered_offset"] == tiered


def test_a_range_tiered_and_deleted_after_planning_is_read_from_the_lake(loglake_spark, broker, lake, topic):
    create_topic(broker.bootstrap, topic, config=TIERED)
    produced = produce(broker, topic, 0, 300)
    options = parse_read_options(
        {"kafka.bootstrap.servers": broker.bootstrap, "subscribe": topic, "startingOffsets": "earliest"},
        streaming=False,
    )
    reader = LoglakeBatchReader(options)  # planned now: no lake yet, every offset from the broker
    partitions = reader.partitions()
    assert partitions and all(isinstance(p, OffsetRangePartition) for p in partitions)

    run(loglake_spark, parse_args(["--bootstrap-servers", broker.bootstrap, "--topics", topic]))
    assert wait_for_local_deletion(broker, topic)["log_start_offset"] > partitions[0].offset_range.start

    rows = [row for p in partitions for batch in reader.read(p) for row in batch.to_pylist()]
    got = sorted((r["offset"], r["key"], r["value"]) for r in rows)
    assert got == [(offset, key, value) for offset, (key, value) in enumerate(produced)]


def read_both(spark, broker, topic: str) -> dict[str, list[tuple[int, bytes, bytes]]]:
    return {i: read_earliest(spark, broker, topic, i) for i in ("read_committed", "read_uncommitted")}


def test_transactions_tier_to_rows_that_read_as_the_log_does(loglake_spark, broker, lake, topic):
    """Committed, aborted and open transactions among plain records: the lake holds what
    lies below the LSO, aborted rows flagged, and lake + log read exactly as the untiered
    log did at both isolation levels, also with an aborted transaction whose records are
    in the lake and whose marker is in the log."""
    from confluent_kafka import Producer

    create_topic(broker.bootstrap, topic, config=TIERED)
    txn = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": topic, "linger.ms": 5})
    txn.init_transactions(30)

    def send(prefix: bytes, count: int) -> None:
        for i in range(count):
            txn.produce(topic, prefix + b"-%d" % i, key=prefix + b"-%d" % i, partition=0)
        txn.flush(30)  # abort_transaction purges unsent records

    def transaction(prefix: bytes, commit: bool) -> None:
        txn.begin_transaction()
        send(prefix, 10)
        txn.commit_transaction(30) if commit else txn.abort_transaction(30)

    transaction(b"committed", commit=True)
    produce(broker, topic, 0, 10)
    transaction(b"aborted", commit=False)
    # Its records span segments: the last segment, holding its marker, stays local.
    txn.begin_transaction()
    send(b"straddling", 5)
    produce(broker, topic, 10, 150)  # rolls segments while the transaction is open
    send(b"straddling-late", 5)
    txn.abort_transaction(30)
    untiered = read_both(loglake_spark, broker, topic)
    marker = state(broker, topic)["high_watermark"] - 1
    straddling = [o for o, k, _ in untiered["read_uncommitted"] if k.startswith(b"straddling")]
    assert not [k for _, k, _ in untiered["read_committed"] if k.startswith((b"aborted", b"straddling"))]

    run(loglake_spark, parse_args(["--bootstrap-servers", broker.bootstrap, "--topics", topic]))
    tiered = wait_for_local_deletion(broker, topic)["tiered_offset"]
    assert straddling[0] < tiered <= marker
    assert read_both(loglake_spark, broker, topic) == untiered
    lake_rows = DeltaTable(str(lake / topic)).to_pyarrow_table(columns=["offset", "aborted"]).to_pylist()
    aborted = [o for o, k, _ in untiered["read_uncommitted"] if k.startswith((b"aborted", b"straddling"))]
    assert sorted(r["offset"] for r in lake_rows if r["aborted"]) == [o for o in aborted if o < tiered]

    # An open transaction bounds what is tiered, however many segments roll after it.
    txn.begin_transaction()
    send(b"open", 5)
    produce(broker, topic, 160, 150)
    untiered = read_both(loglake_spark, broker, topic)
    run(loglake_spark, parse_args(["--bootstrap-servers", broker.bootstrap, "--topics", topic]))
    open_at = min(o for o, k, _ in untiered["read_uncommitted"] if k.startswith(b"open"))
    assert state(broker, topic)["tiered_offset"] == open_at
    assert lake_offsets(lake, topic)[-1] < open_at
    assert read_both(loglake_spark, broker, topic) == untiered
    txn.commit_transaction(30)
    untiered = read_both(loglake_spark, broker, topic)
    run(loglake_spark, parse_args(["--bootstrap-servers", broker.bootstrap, "--topics", topic]))
    assert state(broker, topic)["tiered_offset"] > open_at
    assert read_both(loglake_spark, broker, topic) == untiered
