"""The replica manager when a log dir fails: the partitions on it answer
KAFKA_STORAGE_ERROR, are no longer hosted and are reported once to each controller;
a replica that existed is not created again elsewhere while a dir is offline."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

from disk_helpers import small_disk
from loglake.config import LogConfig
from loglake.coordination.model import LeaderAndIsrPartition, PartitionState
from loglake.errors import ErrorCode, KafkaError
from loglake.record.batch import encode_batch
from loglake.storage.log_manager import LogManager

from ingest_gateway.replica.replica_manager import ReplicaManager

CONFIG = LogConfig(segment_bytes=1 << 20, index_interval_bytes=4096)


def entry(topic: str, leader_epoch: int) -> LeaderAndIsrPartition:
    return LeaderAndIsrPartition(topic, "id", 0, (0,), PartitionState(0, leader_epoch, (0,), 1))


def batch() -> bytes:
    return bytes(encode_batch([(None, b"v" * 1000, [], None)] * 8, 1000))


def test_a_full_dir_takes_its_partitions_offline_and_reports_them_once(tmp_path: Path) -> None:
    with small_disk(tmp_path / "small", 1) as small:

        async def run() -> None:
            logs = LogManager([small, tmp_path / "big"], CONFIG)
            logs.maybe_update_preferred_log_dir("full", 0, small)
            replicas = ReplicaManager(0, logs, CONFIG)
            reported: list[list[tuple[str, int]]] = []
            told = asyncio.Event()
            replicas.log_dir_failure_listeners.append(lambda partitions: (reported.append(partitions), told.set()))
            replicas.start()
            replicas.become_leader_or_follower(1, [entry("full", 0), entry("fine", 0)])
            errors = []
            for _ in range(200):
                result = (await replicas.append_records({("full", 0): batch()}, -1, 5000))[("full", 0)]
                if result.error is not None:
                    errors.append(result.error.code)
                    break
            assert errors == [ErrorCode.KAFKA_STORAGE_ERROR]
            await asyncio.wait_for(told.wait(), 10)
            assert reported == [[("full", 0)]] and ("full", 0) not in replicas.partitions
            again = (await replicas.append_records({("full", 0): batch()}, -1, 5000))[("full", 0)]
            assert again.error is not None and again.error.code == ErrorCode.KAFKA_STORAGE_ERROR
            fine = (await replicas.append_records({("fine", 0): batch()}, -1, 5000))[("fine", 0)]
            assert fine.error is None
            # The controller's next LeaderAndIsr for it: skipped, not created elsewhere, not reported again.
            replicas.become_leader_or_follower(1, [entry("full", 1)])
            assert ("full", 0) not in replicas.partitions and reported == [[("full", 0)]]
            assert not (tmp_path / "big" / "full-0").exists()
            await replicas.stop()
            replicas.shutdown()
            logs.shutdown()

        asyncio.run(run())


def test_a_replica_of_an_offline_dir_found_at_start_up_is_reported(tmp_path: Path) -> None:
    broken = tmp_path / "broken"
    broken.write_text("not a directory")
    logs = LogManager([broken, tmp_path / "fine"], CONFIG)
    replicas = ReplicaManager(0, logs, CONFIG)
    reported: list[list[tuple[str, int]]] = []
    replicas.log_dir_failure_listeners.append(reported.append)
    replicas.become_leader_or_follower(1, [entry("old", 3), entry("new", 0)])
    assert reported == [[("old", 0)]] and ("new", 0) in replicas.partitions
    replicas.become_leader_or_follower(1, [entry("old", 4)])
    assert reported == [[("old", 0)]]  # this controller knows
    # A new controller (a failover) learns it again at its first LeaderAndIsr, once.
    replicas.become_leader_or_follower(2, [entry("old", 5), entry("new", 1)])
    replicas.become_leader_or_follower(2, [entry("old", 6)])
    assert reported == [[("old", 0)], [("old", 0)]]
    try:
        replicas.hosted_partition("old", 0)
    except KafkaError as exc:
        assert exc.code == ErrorCode.KAFKA_STORAGE_ERROR and str(broken) in exc.message
    else:
        raise AssertionError("an offline replica answered")
    replicas.shutdown()
    logs.shutdown()


def test_a_dir_that_fails_before_the_event_loop_runs_is_handled_when_it_starts(tmp_path: Path) -> None:
    with small_disk(tmp_path / "small", 1) as small:
        logs = LogManager([small], CONFIG)
        replicas = ReplicaManager(0, logs, CONFIG)
        handed_over = threading.Event()
        logs.offline_listeners.append(lambda *_: handed_over.set())
        log = logs.get_or_create_log("early", 0)
        try:
            for _ in range(200):
                log.append_as_leader(batch(), 0)
        except KafkaError as exc:
            assert exc.code == ErrorCode.KAFKA_STORAGE_ERROR
        assert handed_over.wait(10)
        reported: list[list[tuple[str, int]]] = []
        replicas.log_dir_failure_listeners.append(reported.append)

        async def run() -> None:
            replicas.start()
            await replicas.stop()

        asyncio.run(run())
        assert reported == [[("early", 0)]] and replicas.offline_partitions.keys() == {("early", 0)}
        replicas.shutdown()
        logs.shutdown()
