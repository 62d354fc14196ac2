"""A follower's truncation by leader epoch (KIP-101/KIP-279), as the replica fetcher does
it, against a leader log answering OffsetForLeaderEpoch (no sockets)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from test_storage_support import make_batch, stamped

from ingest_gateway.replica.replica_fetcher import ReplicaFetcher, ReplicaFetcherConfig
from loglake.cluster.partition import Partition
from loglake.config import LogConfig
from loglake.coordination.model import PartitionState
from loglake.errors import ErrorCode
from loglake.protocol import ApiKey
from loglake.storage.log import Log

TP = ("t", 0)


def write(log: Log, epochs: list[int]) -> None:
    """One single-record batch per entry, at the log end, with that leader epoch."""
    for epoch in epochs:
        offset = log.log_end_offset
        log.append_as_follower(stamped(make_batch(1, tag=offset * 100 + epoch), offset, epoch))


class LeaderStub:
    """Answers OffsetForLeaderEpoch from a leader's log, recording the epochs asked."""

    def __init__(self, log: Log, leader_epoch: int, error: ErrorCode = ErrorCode.NONE) -> None:
        self.log = log
        self.leader_epoch = leader_epoch
        self.error = error
        self.asked: list[int] = []

    async def request(self, api_key, version, body, **kwargs):
        assert api_key == ApiKey.OFFSET_FOR_LEADER_EPOCH
        topics = []
        for t in body["topics"]:
            parts = []
            for p in t["partitions"]:
                assert p["current_leader_epoch"] == self.leader_epoch
                self.asked.append(p["leader_epoch"])
                epoch, end = self.log.end_offset_for_epoch(p["leader_epoch"])
                parts.append(
                    {"partition": p["partition"], "error_code": self.error, "leader_epoch": epoch, "end_offset": end}
                )
            topics.append({"topic": t["topic"], "partitions": parts})
        return {"topics": topics}


def follower(tmp_path: Path, name: str, leader_epoch: int, hw: int = 0, epochs: list[int] = ()) -> Partition:
    log = Log.open(tmp_path / name / "t-0", LogConfig())
    write(log, list(epochs))
    p = Partition("t", 0, "id", log, broker_id=2, high_watermark=hw)
    p.make_follower(PartitionState(1, leader_epoch, (1, 2), 1), (1, 2))
    return p


def truncate(partition: Partition, leader: LeaderStub, rounds: int = 5) -> ReplicaFetcher:
    fetcher = ReplicaFetcher(2, 1, {TP: partition}.get, lambda b: None, ReplicaFetcherConfig())
    fetcher.add_partitions({TP: (partition.leader_epoch, partition.log_end_offset)})
    state = fetcher.partitions[TP]

    async def main() -> None:
        for _ in range(rounds):
            if not state.truncating or state.failed or state.delayed_until:
                return
            await fetcher._truncate(leader, {TP: state})

    asyncio.run(main())
    return fetcher


def epochs_of(log: Log) -> list[tuple[int, int]]:
    return [(e.epoch, e.start_offset) for e in log.leader_epoch_cache.entries]


def test_follower_ahead_in_the_same_epoch_keeps_up_to_the_leaders_end(tmp_path: Path) -> None:
    leader_log = Log.open(tmp_path / "leader" / "t-0", LogConfig())
    write(leader_log, [0, 0, 0])
    p = follower(tmp_path, "f", leader_epoch=0, hw=1, epochs=[0, 0, 0])
    assert p.high_watermark == 1
    stub = LeaderStub(leader_log, 0)
    fetcher = truncate(p, stub)
    assert stub.asked == [0]
    assert p.log_end_offset == 3  # not the stale HW of 1
    assert fetcher.partitions[TP].state == "fetching" and fetcher.partitions[TP].fetch_offset == 3


def test_divergent_tail_of_an_epoch_the_leader_never_had_is_cut_in_two_rounds(tmp_path: Path) -> None:
    # Follower: epoch 0 at [0, 2), then epoch 2 (it led, unreplicated) at [2, 4).
    # Leader:   epoch 0 at [0, 2), epoch 1 at [2, 3), epoch 3 at [3, 5).
    leader_log = Log.open(tmp_path / "leader" / "t-0", LogConfig())
    write(leader_log, [0, 0, 1, 3, 3])
    p = follower(tmp_path, "f", leader_epoch=3)
    write(p.log, [0, 0, 2, 2])
    stub = LeaderStub(leader_log, 3)
    fetcher = truncate(p, stub)
    # Asked for 2, told (1, 3); we have no epoch 1: cut to the end of our epoch 0 (2) and
    # ask again for 0, told (0, 2): done at 2.
    assert stub.asked == [2, 0]
    assert p.log_end_offset == 2
    assert epochs_of(p.log) == [(0, 0)]
    assert fetcher.partitions[TP].fetch_offset == 2 and not fetcher.partitions[TP].truncating


def test_follower_without_epochs_truncates_to_its_hw(tmp_path: Path) -> None:
    leader_log = Log.open(tmp_path / "leader" / "t-0", LogConfig())
    p = follower(tmp_path, "f", leader_epoch=0)
    stub = LeaderStub(leader_log, 0)
    truncate(p, stub)
    assert stub.asked == []
    assert p.log_end_offset == 0


def test_leader_without_our_epoch_or_older_falls_back_to_the_hw(tmp_path: Path) -> None:
    leader_log = Log.open(tmp_path / "leader" / "t-0", LogConfig())
    write(leader_log, [5, 5])
    # Newer than anything the leader knows: it answers (-1, -1).
    p = follower(tmp_path, "f", leader_epoch=5, hw=1, epochs=[7, 7, 7])
    truncate(p, LeaderStub(leader_log, 5))
    assert p.log_end_offset == 1


def test_fenced_partition_stops_and_retriable_errors_back_off(tmp_path: Path) -> None:
    leader_log = Log.open(tmp_path / "leader" / "t-0", LogConfig())
    write(leader_log, [0])
    p = follower(tmp_path, "f", leader_epoch=0)
    write(p.log, [0])
    fetcher = truncate(p, LeaderStub(leader_log, 0, ErrorCode.FENCED_LEADER_EPOCH))
    assert fetcher.partitions[TP].failed
    fetcher = truncate(p, LeaderStub(leader_log, 0, ErrorCode.UNKNOWN_LEADER_EPOCH))
    state = fetcher.partitions[TP]
    assert not state.failed and state.truncating and state.delayed_until > 0
