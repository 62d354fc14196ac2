"""Moving a replica between the log dirs of one broker: the copy, its alignment with a current log
that changes under it, the swap and its checkpoints, and restarts at every crash point."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from loglake.config import LogConfig
from loglake.coordination.model import LeaderAndIsrPartition, PartitionState
from loglake.errors import ErrorCode, KafkaError
from loglake.record.batch import decode_batches, encode_batch
from loglake.storage.checkpoints import LOG_START_OFFSET_CHECKPOINT, RECOVERY_POINT_CHECKPOINT, OffsetCheckpointFile
from loglake.storage.log import Log
from loglake.storage.log_manager import LogManager

from ingest_gateway.apis.log_dir_apis import LogDirApis
from ingest_gateway.replica.replica_alter_log_dirs import ReplicaAlterLogDirsManager, align_future_log, copy_chunk
from ingest_gateway.replica.replica_fetcher import ReplicaFetcherConfig
from ingest_gateway.replica.replica_manager import HIGH_WATERMARK_CHECKPOINT, ReplicaManager

TOPIC = "moving"
KEY = (TOPIC, 0)
CONFIG = LogConfig(segment_bytes=4000, index_interval_bytes=200)
CHUNK = 1500


def batch(tag: str, count: int = 3) -> bytes:
    return bytes(encode_batch([(None, f"{tag}-{i}".encode().ljust(60, b"."), [], None) for i in range(count)], 1000))


def records(log: Log) -> list[tuple[int, str]]:
    """(offset, value) of every record from the log start, values unpadded."""
    return [
        (r.offset, r.value.rstrip(b".").decode())
        for _, rs in decode_batches(contents(log))
        for r in rs
        if r.offset >= log.log_start_offset
    ]


def copy_all(current: Log, future: Log) -> None:
    while future.log_end_offset < current.log_end_offset:
        align_future_log(current, future)
        copy_chunk(current, future, CHUNK)


def contents(log: Log) -> bytes:
    data, offset = b"", log.log_start_offset
    while offset < log.log_end_offset:
        piece = log.read(offset, 1 << 20)
        data, offset = data + piece.read_bytes(), piece.next_offset
    return data


class Node:
    """A broker's storage and replica manager over two log dirs, leading one partition."""

    def __init__(self, dirs: list[Path]) -> None:
        self.dirs = dirs
        self.logs = LogManager(dirs, CONFIG)
        self.replicas = ReplicaManager(0, self.logs, CONFIG, fetcher_config=ReplicaFetcherConfig(fetch_max_bytes=CHUNK))
        self.mover = ReplicaAlterLogDirsManager(self.replicas)

    def lead(self, leader_epoch: int = 1) -> None:
        state = PartitionState(0, leader_epoch, (0,), 1)
        entry = LeaderAndIsrPartition(TOPIC, "id", 0, (0,), state, {"segment.bytes": "4000"})
        self.replicas.become_leader_or_follower(1, [entry])

    @property
    def log(self) -> Log:
        return self.replicas.partitions[KEY].log

    async def produce(self, tag: str, batches: int = 1) -> None:
        for i in range(batches):
            results = await self.replicas.append_records({KEY: batch(f"{tag}{i}")}, -1, 5000)
            assert results[KEY].error is None, results[KEY].error

    async def wait_moved(self, target: Path) -> None:
        async with asyncio.timeout(20):
            while self.mover.is_moving(*KEY) or self.log.dir.parent != target:
                await asyncio.sleep(0.01)

    async def stop(self) -> None:
        await self.mover.stop()
        await self.replicas.stop()
        self.replicas.shutdown()
        self.logs.shutdown()


def run(dirs: list[Path], scenario: Callable[[Node], Awaitable[None]]) -> None:
    async def main() -> None:
        node = Node(dirs)
        node.lead()
        node.replicas.start()
        node.mover.start()
        await scenario(node)

    asyncio.run(main())


def checkpointed(log_dir: Path, name: str) -> dict[tuple[str, int], int]:
    return OffsetCheckpointFile(log_dir / name).read()


@pytest.fixture
def dirs(tmp_path: Path) -> list[Path]:
    return [tmp_path / "a", tmp_path / "b"]


def test_a_move_copies_while_appends_continue_and_swaps_the_checkpoints(dirs: list[Path]) -> None:
    async def scenario(node: Node) -> None:
        await node.produce("before", 40)
        source, target = node.log.dir.parent, next(d for d in dirs if d != node.log.dir.parent)
        node.replicas.partitions[KEY].delete_records(6)
        await node.mover.alter_log_dir(TOPIC, 0, str(target))
        assert node.logs.get_future_log(*KEY).dir.parent == target
        writes = asyncio.create_task(node.produce("during", 30))
        await node.wait_moved(target)
        await writes
        await node.produce("after", 5)
        log = node.log
        assert log is node.logs.get_log(*KEY) and not log.is_future and log.dir.name == "moving-0"
        assert node.logs.get_future_log(*KEY) is None
        assert not [p.name for p in source.iterdir() if p.name.startswith("moving")]
        assert (log.log_start_offset, log.log_end_offset) == (6, 3 * 75)
        expected = [f"{tag}{i}" for tag, n in [("before", 40), ("during", 30), ("after", 5)] for i in range(n)]
        assert records(log) == [(o, f"{expected[o // 3]}-{o % 3}") for o in range(6, 225)]
        for name in (RECOVERY_POINT_CHECKPOINT, LOG_START_OFFSET_CHECKPOINT, HIGH_WATERMARK_CHECKPOINT):
            assert KEY not in checkpointed(source, name), name
            assert KEY in checkpointed(target, name), name
        assert checkpointed(target, LOG_START_OFFSET_CHECKPOINT)[KEY] == 6
        await node.stop()
        assert checkpointed(target, HIGH_WATERMARK_CHECKPOINT)[KEY] == 225
        assert checkpointed(target, RECOVERY_POINT_CHECKPOINT)[KEY] == 225

    run(dirs, scenario)


def test_the_future_log_follows_truncation_and_the_log_start_of_the_current_log(dirs: list[Path]) -> None:
    logs = LogManager(dirs, CONFIG)
    current = logs.get_or_create_log(TOPIC, 0)
    for i in range(10):
        current.append_as_leader(batch(f"e1-{i}"), leader_epoch=1)
    target = next(d for d in dirs if d != current.dir.parent)
    future = logs.create_future_log(TOPIC, 0, target)
    copy_all(current, future)
    assert future.log_end_offset == 30
    # A divergent tail: the current log is cut and written again under a new epoch.
    current.truncate_to(15)
    for i in range(6):
        current.append_as_leader(batch(f"e2-{i}"), leader_epoch=2)
    assert current.log_end_offset == 33
    align_future_log(current, future)
    assert future.log_end_offset == 15
    copy_all(current, future)
    assert contents(future) == contents(current)
    # The current log's start passes everything the future holds.
    for i in range(10):
        current.append_as_leader(batch(f"e2-more-{i}"), leader_epoch=2)
    current.increment_log_start_offset(current.log_end_offset - 4)
    align_future_log(current, future)
    copy_all(current, future)
    align_future_log(current, future)
    assert future.log_start_offset == current.log_start_offset
    assert records(future) == records(current)


def test_a_restart_mid_copy_resumes_the_move(dirs: list[Path]) -> None:
    async def crash_mid_copy(node: Node) -> None:
        await node.produce("before", 40)
        target = next(d for d in dirs if d != node.log.dir.parent)
        future = node.logs.create_future_log(TOPIC, 0, target)
        copy_chunk(node.log, future, CHUNK)
        assert 0 < future.log_end_offset < node.log.log_end_offset
        # The process dies here: nothing is closed or checkpointed.

    async def restart(node: Node) -> None:
        future = node.logs.get_future_log(*KEY)
        assert future is not None and future.is_future and future.dir.parent != node.log.dir.parent
        target = future.dir.parent
        await node.wait_moved(target)
        assert records(node.log) == [(o, f"before{o // 3}-{o % 3}") for o in range(120)]
        await node.stop()

    run(dirs, crash_mid_copy)
    run(dirs, restart)


@pytest.mark.parametrize("crash_at", ["between the renames", "before deleting the old copy"])
def test_a_crash_during_the_swap_leaves_one_live_copy(dirs: list[Path], crash_at: str) -> None:
    class Crash(Exception):
        pass

    def crash(*args: object) -> None:
        raise Crash()

    async def crash_in_swap(node: Node) -> None:
        await node.produce("before", 40)
        source, target = dirs
        assert node.log.dir.parent == source
        future = node.logs.create_future_log(TOPIC, 0, target)
        copy_all(node.log, future)
        if crash_at == "between the renames":
            future.rename_dir = crash  # type: ignore[method-assign]
        else:
            node.log.delete = crash  # type: ignore[method-assign]
        with pytest.raises(Crash):
            node.logs.replace_current_with_future(TOPIC, 0)
        assert [p.name.endswith("-delete") for p in source.iterdir() if p.name.startswith("moving")] == [True]

    async def restart(node: Node) -> None:
        assert node.logs.get_future_log(*KEY) is None
        source, target = dirs
        assert node.log.dir == target / "moving-0"
        assert records(node.log) == [(o, f"before{o // 3}-{o % 3}") for o in range(120)]
        assert not [p for p in source.iterdir() if p.name.startswith("moving")]
        assert [p.name for p in target.iterdir() if p.name.startswith("moving")] == ["moving-0"]
        await node.produce("after", 1)
        await node.stop()

    run(dirs, crash_in_swap)
    run(dirs, restart)


def test_a_new_destination_replaces_a_move_and_stop_replica_deletes_the_future_log(dirs: list[Path]) -> None:
    async def scenario(node: Node) -> None:
        await node.produce("before", 40)
        source, target = node.log.dir.parent, next(d for d in dirs if d != node.log.dir.parent)
        await node.mover.alter_log_dir(TOPIC, 0, str(target))
        assert node.logs.get_future_log(*KEY) is not None and node.mover.is_moving(*KEY)
        # Back to where it is, before the move task ran at all: the move is abandoned
        # and its future log deleted.
        await node.mover.alter_log_dir(TOPIC, 0, str(source))
        assert node.logs.get_future_log(*KEY) is None
        assert not [p for p in target.iterdir() if p.name.startswith("moving")]
        with pytest.raises(KafkaError) as missing:
            await node.mover.alter_log_dir(TOPIC, 0, str(source / "elsewhere"))
        assert missing.value.code == ErrorCode.LOG_DIR_NOT_FOUND
        await node.mover.alter_log_dir(TOPIC, 0, str(target))
        await node.wait_moved(target)
        node.logs.create_future_log(TOPIC, 0, source)
        node.replicas.stop_replicas(1, [KEY], delete=True)
        assert node.logs.get_future_log(*KEY) is None and node.logs.get_log(*KEY) is None
        assert not [p for d in dirs for p in d.iterdir() if p.name.startswith("moving")]
        await node.stop()

    run(dirs, scenario)


def test_describe_log_dirs_shows_a_future_log_and_its_lag(dirs: list[Path]) -> None:
    async def scenario(node: Node) -> None:
        await node.produce("before", 40)
        source, target = dirs
        future = node.logs.create_future_log(TOPIC, 0, target)  # filled by hand: no move task
        copy_chunk(node.log, future, CHUNK)
        node.logs.get_or_create_log("unhosted", 0)
        apis = LogDirApis(node.replicas, node.mover)
        response = await apis.describe_log_dirs(None, {"topics": None})  # type: ignore[arg-type]
        by_dir = {r["log_dir"]: {t["name"]: t["partitions"] for t in r["topics"]} for r in response["results"]}
        (current_entry,) = by_dir[str(source)][TOPIC]
        (future_entry,) = by_dir[str(target)][TOPIC]
        assert current_entry == {
            "partition_index": 0,
            "partition_size": node.log.size,
            "offset_lag": 0,
            "is_future_key": False,
        }
        assert future_entry == {
            "partition_index": 0,
            "partition_size": future.size,
            "offset_lag": 120 - future.log_end_offset,
            "is_future_key": True,
        }
        assert 0 < future_entry["offset_lag"] < 120
        (unhosted,) = next(t for t in by_dir.values() if "unhosted" in t)["unhosted"]
        assert unhosted["offset_lag"] == -1
        wanted = {"topics": [{"topic": "unhosted", "partitions": [0]}]}
        only = await apis.describe_log_dirs(None, wanted)  # type: ignore[arg-type]
        assert [t["name"] for r in only["results"] for t in r["topics"]] == ["unhosted"]
        await node.stop()

    run(dirs, scenario)
