"""Storage faults: a full or failing log dir goes offline through the failure channel,
appends stay whole, nothing acknowledged is lost, and damaged files at start-up are
rebuilt or refused with a message naming them. Full disks are real (a small tmpfs)."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest
from disk_helpers import ext4_disk, fail_disk, fill_disk, small_disk
from loglake.config import LogConfig
from loglake.coordination.embedded import EmbeddedMetadataStore
from loglake.coordination.model import PartitionState, TopicDescription
from loglake.errors import ErrorCode, KafkaError
from loglake.storage.checkpoints import LOG_START_OFFSET_CHECKPOINT, RECOVERY_POINT_CHECKPOINT
from loglake.storage.file_records import FileRecords
from loglake.storage.leader_epoch_cache import LEADER_EPOCH_CHECKPOINT
from loglake.storage.log_manager import CLEAN_SHUTDOWN_FILE, LogManager
from loglake.storage.meta_properties import META_PROPERTIES, InconsistentMetaPropertiesError
from test_storage_support import make_batch

DEFAULTS = LogConfig(segment_bytes=64 * 1024, index_interval_bytes=512)


def append_until_refused(manager: LogManager, topic: str, limit: int = 100_000) -> tuple[list[int], KafkaError]:
    """Append 1 KB batches until the log refuses one; the end offsets acknowledged, and the refusal."""
    log = manager.get_or_create_log(topic, 0)
    acked = []
    for i in range(limit):
        try:
            info = log.append_as_leader(make_batch(1, tag=i, value_size=1000), leader_epoch=0)
        except KafkaError as exc:
            return acked, exc
        acked.append(info.last_offset + 1)
    raise AssertionError("the disk never filled")


def offline_events(manager: LogManager) -> tuple[list[tuple[Path, list[tuple[str, int]]]], threading.Event]:
    events: list[tuple[Path, list[tuple[str, int]]]] = []
    done = threading.Event()

    def listener(log_dir: Path, partitions: list[tuple[str, int]]) -> None:
        events.append((log_dir, partitions))
        done.set()

    manager.offline_listeners.append(listener)
    return events, done


def read_all(manager: LogManager, topic: str) -> int:
    """How many records the log holds, read back batch by batch from its start."""
    log = manager.get_log(topic, 0)
    assert log is not None
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        offset = log.read(offset, 1 << 20).next_offset
    return offset - log.log_start_offset


def test_a_full_dir_goes_offline_once_and_the_other_dir_takes_new_logs(tmp_path: Path) -> None:
    with small_disk(tmp_path / "small", 2) as small:
        big = tmp_path / "big"
        manager = LogManager([small, big], DEFAULTS)
        events, handled = offline_events(manager)
        manager.maybe_update_preferred_log_dir("full", 0, small)
        manager.maybe_update_preferred_log_dir("healthy", 0, big)
        manager.get_or_create_log("healthy", 0).append_as_leader(make_batch(1), 0)
        acked, refused = append_until_refused(manager, "full")
        log = manager.get_log("full", 0)
        assert refused.code == ErrorCode.KAFKA_STORAGE_ERROR and "No space left" in refused.message
        assert log is not None and log.log_end_offset == acked[-1]
        # Offline now: the next append is refused without touching the disk.
        with pytest.raises(KafkaError) as again:
            log.append_as_leader(make_batch(1), 0)
        assert again.value.code == ErrorCode.KAFKA_STORAGE_ERROR
        assert manager.failure_channel.repeated_reports == 0
        assert handled.wait(10)
        assert events == [(small, [("full", 0)])]
        assert manager.offline_dirs == {small} and manager.live_dirs == [big]
        assert manager.get_log("full", 0) is None and manager.offline_partitions() == {("full", 0): small}
        with pytest.raises(KafkaError) as not_elsewhere:
            manager.get_or_create_log("full", 0)
        assert not_elsewhere.value.code == ErrorCode.KAFKA_STORAGE_ERROR
        assert manager.get_or_create_log("new", 0).dir.parent == big
        manager.checkpoint_recovery_points()
        assert not list(small.glob("*.tmp")) and not list(small.glob("*/*.tmp"))
        manager.shutdown()
        assert not (small / CLEAN_SHUTDOWN_FILE).exists() and (big / CLEAN_SHUTDOWN_FILE).exists()
        # Restarted on the still full disk: recovered, every acknowledged record is there.
        reopened = LogManager([small, big], DEFAULTS)
        assert reopened.get_log("full", 0).log_end_offset == acked[-1]
        assert read_all(reopened, "full") == len(acked)
        reopened.shutdown()


def test_a_failed_append_leaves_no_bytes_behind(tmp_path: Path) -> None:
    with small_disk(tmp_path / "small", 1) as small:
        records = FileRecords(small / "00000000000000000000.log")
        records.append([b"x" * 1000])
        fill_disk(small, leave_bytes=0)
        with pytest.raises(OSError):
            records.append([b"y" * 4096, b"z" * 200_000])  # a short write, then ENOSPC
        assert records.size == 1000 and os.path.getsize(records.path) == 1000
        records.close()


def test_a_failing_disk_goes_offline_and_start_up_refuses_it_with_a_message(tmp_path: Path) -> None:
    with ext4_disk(tmp_path / "disk", tmp_path / "disk.img") as disk:
        manager = LogManager([disk], DEFAULTS)
        events, handled = offline_events(manager)
        log = manager.get_or_create_log("t", 0)
        for i in range(20):
            log.append_as_leader(make_batch(1, tag=i, value_size=1000), 0)
        fail_disk(disk)
        with pytest.raises(KafkaError) as refused:
            log.append_as_leader(make_batch(1), 0)
            log.flush()  # the page cache may take the append; the fsync cannot succeed
        assert refused.value.code == ErrorCode.KAFKA_STORAGE_ERROR and "Input/output error" in refused.value.message
        assert handled.wait(10) and events == [(disk, [("t", 0)])]
        assert manager.live_dirs == []
        with pytest.raises(KafkaError) as no_dir:
            manager.get_or_create_log("other", 0)
        assert no_dir.value.code == ErrorCode.KAFKA_STORAGE_ERROR
        manager.shutdown()
        with pytest.raises(RuntimeError, match="every log dir is offline"):
            LogManager([disk], DEFAULTS)


def write_log(tmp_path: Path, batches: int = 60, clean: bool = True) -> tuple[Path, LogManager]:
    log_dir = tmp_path / "logs"
    manager = LogManager([log_dir], DEFAULTS)
    log = manager.get_or_create_log("t", 0)
    for i in range(batches):
        log.append_as_leader(make_batch(2, tag=i, value_size=1000), leader_epoch=i // 20)
    if clean:
        manager.shutdown()
    return log_dir, manager


@pytest.mark.parametrize("clean", [True, False])
def test_garbage_checkpoints_and_empty_indexes_are_rebuilt(tmp_path: Path, clean: bool) -> None:
    log_dir, _ = write_log(tmp_path, clean=clean)
    partition = log_dir / "t-0"
    epochs_before = (partition / LEADER_EPOCH_CHECKPOINT).read_text()
    for name in (RECOVERY_POINT_CHECKPOINT, LOG_START_OFFSET_CHECKPOINT):
        (log_dir / name).write_bytes(b"\xff\xfegarbage\n")
    (partition / LEADER_EPOCH_CHECKPOINT).write_text("0\n7\n1 2 3\n")
    for index in [*partition.glob("*.index"), *partition.glob("*.timeindex")]:
        index.write_bytes(b"")
    (log_dir / "recovery-point-offset-checkpoint.tmp").write_text("half")
    (partition / "leader-epoch-checkpoint.tmp").write_text("half")
    manager = LogManager([log_dir], DEFAULTS)
    log = manager.get_log("t", 0)
    assert log is not None and log.log_end_offset == 120 and read_all(manager, "t") == 120
    assert (partition / LEADER_EPOCH_CHECKPOINT).read_text() == epochs_before
    assert log.end_offset_for_epoch(1) == (1, 80)
    assert not list(log_dir.glob("*.tmp")) and not list(partition.glob("*.tmp"))
    assert all(p.stat().st_size > 0 for p in partition.glob("*.index") if p.name != f"{120:020d}.index")
    manager.shutdown()


def test_a_missing_meta_properties_is_written_again_a_damaged_one_is_refused(tmp_path: Path) -> None:
    first, second = tmp_path / "a", tmp_path / "b"
    manager = LogManager([first, second], DEFAULTS, broker_id=3)
    manager.shutdown()
    (second / META_PROPERTIES).unlink()
    again = LogManager([first, second], DEFAULTS, broker_id=3)
    assert (second / META_PROPERTIES).exists() and again.cluster_id == manager.cluster_id
    again.shutdown()
    for damaged in (b"", b"\x00\x01binary", b"broker.id=three\ncluster.id=x\n"):
        (second / META_PROPERTIES).write_bytes(damaged)
        with pytest.raises(InconsistentMetaPropertiesError) as refused:
            LogManager([first, second], DEFAULTS, broker_id=3)
        assert str(second / META_PROPERTIES) in str(refused.value) and "delete the file" in str(refused.value)


def test_the_embedded_store_on_a_full_disk_refuses_a_change_and_keeps_the_old_state(tmp_path: Path) -> None:
    with small_disk(tmp_path / "small", 1) as small:
        store = EmbeddedMetadataStore(small)
        store.create_topic(TopicDescription("kept", "id1", {0: (0,)}), {0: PartitionState(0, 0, (0,), 1)})
        filler = fill_disk(small)
        with pytest.raises(KafkaError) as refused:
            store.create_topic(TopicDescription("lost", "id2", {0: (0,)}), {0: PartitionState(0, 0, (0,), 1)})
        assert refused.value.code == ErrorCode.KAFKA_STORAGE_ERROR and str(small) in refused.value.message
        assert set(store.topics()) == {"kept"} and not list(small.glob("*.tmp"))
        filler.unlink()
        store.create_topic(TopicDescription("later", "id3", {0: (0,)}), {0: PartitionState(0, 0, (0,), 1)})
        assert set(EmbeddedMetadataStore(small).topics()) == {"kept", "later"}


def test_a_replica_that_existed_is_not_created_again_while_a_dir_is_offline(tmp_path: Path) -> None:
    broken, healthy = tmp_path / "broken", tmp_path / "healthy"
    broken.write_text("not a directory")
    manager = LogManager([broken, healthy], DEFAULTS)
    with pytest.raises(KafkaError) as refused:
        manager.get_or_create_log("old", 0, is_new=False)
    assert refused.value.code == ErrorCode.KAFKA_STORAGE_ERROR and str(broken) in refused.value.message
    assert manager.get_or_create_log("new", 0).dir.parent == healthy
    manager.shutdown()
