"""LogManager: log dirs, meta.properties, placement, checkpoints, clean and unclean restarts, deletion."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_storage_support import make_batch

from loglake.config import LogConfig
from loglake.errors import ErrorCode, KafkaError
from loglake.storage.checkpoints import OffsetCheckpointFile
from loglake.storage.log_manager import CLEAN_SHUTDOWN_FILE, LogManager
from loglake.storage.meta_properties import InconsistentMetaPropertiesError, MetaProperties

DEFAULTS = LogConfig(segment_bytes=2000, index_interval_bytes=100)


def dirs(tmp_path: Path, count: int = 2) -> list[Path]:
    return [tmp_path / f"logs{i}" for i in range(count)]


def fill(manager: LogManager, topic: str, partition: int, batches: int) -> None:
    log = manager.get_or_create_log(topic, partition)
    for i in range(batches):
        log.append_as_leader(make_batch(2, tag=i, value_size=40), leader_epoch=1)


def contents(manager: LogManager, topic: str, partition: int) -> bytes:
    log = manager.get_log(topic, partition)
    data, offset = b"", log.log_start_offset
    while offset < log.log_end_offset:
        piece = log.read(offset, 10**6)
        data, offset = data + piece.read_bytes(), piece.next_offset
    return data


def test_meta_properties_bind_dirs_to_a_broker_and_cluster(tmp_path: Path) -> None:
    log_dirs = dirs(tmp_path)
    manager = LogManager(log_dirs, DEFAULTS, broker_id=4)
    metas = [MetaProperties.read(d / "meta.properties") for d in log_dirs]
    assert metas[0] == metas[1] == MetaProperties(4, manager.cluster_id)
    assert LogManager(log_dirs, DEFAULTS, broker_id=4).cluster_id == manager.cluster_id
    with pytest.raises(InconsistentMetaPropertiesError, match="broker.id=4"):
        LogManager(log_dirs, DEFAULTS, broker_id=5)
    MetaProperties(4, "another-cluster-id-xxxx").write(log_dirs[1] / "meta.properties")
    with pytest.raises(InconsistentMetaPropertiesError, match="different clusters"):
        LogManager(log_dirs, DEFAULTS, broker_id=4)


def test_new_logs_go_to_the_dir_with_fewest_partitions(tmp_path: Path) -> None:
    log_dirs = dirs(tmp_path)
    manager = LogManager(log_dirs, DEFAULTS)
    created = [manager.get_or_create_log("orders", p) for p in range(4)]
    assert [log.dir.parent for log in created] == [log_dirs[0], log_dirs[1], log_dirs[0], log_dirs[1]]
    assert (log_dirs[1] / "orders-1" / "00000000000000000000.log").exists()
    assert manager.get_or_create_log("orders", 2) is created[2]
    assert manager.get_log("orders", 9) is None
    assert sorted((log.topic, log.partition) for log in manager.all_logs()) == [("orders", p) for p in range(4)]
    custom = LogConfig(segment_bytes=5000)
    assert manager.get_or_create_log("orders", 2, custom).config is custom


def test_clean_shutdown_and_restart_keep_everything(tmp_path: Path) -> None:
    log_dirs = dirs(tmp_path)
    manager = LogManager(log_dirs, DEFAULTS)
    fill(manager, "orders", 0, 40)
    fill(manager, "my-topic", 1, 5)
    manager.get_log("orders", 0).increment_log_start_offset(30)
    before = {key: contents(manager, *key) for key in [("orders", 0), ("my-topic", 1)]}
    manager.shutdown()
    for d in log_dirs:
        assert (d / CLEAN_SHUTDOWN_FILE).exists()
    recovery_points = OffsetCheckpointFile(log_dirs[0] / "recovery-point-offset-checkpoint").read()
    assert recovery_points == {("orders", 0): 80}
    assert (log_dirs[1] / "recovery-point-offset-checkpoint").read_text() == "0\n1\nmy-topic 1 10\n"
    assert OffsetCheckpointFile(log_dirs[0] / "log-start-offset-checkpoint").read() == {("orders", 0): 30}

    restarted = LogManager(log_dirs, DEFAULTS)
    assert not any((d / CLEAN_SHUTDOWN_FILE).exists() for d in log_dirs)  # a crash from now on is noticed
    orders = restarted.get_log("orders", 0)
    assert (orders.log_start_offset, orders.log_end_offset, orders.recovery_point) == (30, 80, 80)
    assert {key: contents(restarted, *key) for key in before} == before
    assert orders.append_as_leader(make_batch(1), 1).first_offset == 80
    assert orders.leader_epoch_cache.latest_epoch == 1


def test_clean_restart_does_not_rescan_but_unclean_restart_recovers(tmp_path: Path) -> None:
    log_dirs = dirs(tmp_path, 1)
    manager = LogManager(log_dirs, DEFAULTS)
    fill(manager, "t", 0, 10)
    manager.shutdown()
    active = sorted((log_dirs[0] / "t-0").glob("*.log"))[-1]
    raw = bytearray(active.read_bytes())
    raw[-1] ^= 0xFF  # a CRC error that only a recovery scan finds
    active.write_bytes(bytes(raw))
    trusted = LogManager(log_dirs, DEFAULTS)
    assert trusted.get_log("t", 0).log_end_offset == 20
    # No shutdown this time: the next start recovers and drops the bad batch.
    recovered = LogManager(log_dirs, DEFAULTS)
    assert recovered.get_log("t", 0).log_end_offset == 18


def test_unclean_restart_recovers_a_torn_tail_from_the_recovery_point(tmp_path: Path) -> None:
    log_dirs = dirs(tmp_path, 1)
    manager = LogManager(log_dirs, DEFAULTS)
    fill(manager, "t", 0, 30)
    log = manager.get_log("t", 0)
    log.flush()
    manager.checkpoint_recovery_points()
    flushed = log.log_end_offset
    fill(manager, "t", 0, 5)
    good = contents(manager, "t", 0)
    active = sorted((log_dirs[0] / "t-0").glob("*.log"))[-1]
    with open(active, "ab") as f:  # the broker died in the middle of a write
        f.write(make_batch(3)[:50])
    restarted = LogManager(log_dirs, DEFAULTS)
    log = restarted.get_log("t", 0)
    assert log.log_end_offset == 70 and log.recovery_point == flushed
    assert contents(restarted, "t", 0) == good


def test_delete_log_renames_then_removes(tmp_path: Path) -> None:
    log_dirs = dirs(tmp_path, 1)
    manager = LogManager(log_dirs, DEFAULTS)
    fill(manager, "gone", 0, 3)
    fill(manager, "kept", 0, 3)
    slice_before = manager.get_log("gone", 0).read(0, 10**6)
    assert manager.delete_log("gone", 0)
    assert not manager.delete_log("gone", 0)
    assert manager.get_log("gone", 0) is None
    assert sorted(p.name for p in log_dirs[0].iterdir() if p.is_dir()) == ["kept-0"]
    assert slice_before.read_bytes()  # a fetch in flight still reads its batches
    assert "gone" not in (log_dirs[0] / "recovery-point-offset-checkpoint").read_text()
    # A deletion cut short by a crash is finished at the next start.
    stale = log_dirs[0] / "old-0.0123456789abcdef0123456789abcdef-delete"
    stale.mkdir()
    (stale / "00000000000000000000.log").write_bytes(b"")
    LogManager(log_dirs, DEFAULTS)
    assert not stale.exists()


def test_flush_dirty_honours_flush_ms(tmp_path: Path) -> None:
    manager = LogManager(dirs(tmp_path, 1), DEFAULTS)
    eager = manager.get_or_create_log("eager", 0, LogConfig(flush_ms=0))
    lazy = manager.get_or_create_log("lazy", 0)
    for log in (eager, lazy):
        log.append_as_leader(make_batch(3), 0)
    manager.flush_dirty()
    assert (eager.recovery_point, lazy.recovery_point) == (3, 0)


def test_placement_counts_future_logs_prefers_the_requested_dir_and_skips_offline_dirs(tmp_path: Path) -> None:
    log_dirs = dirs(tmp_path, 3)
    log_dirs[2].write_text("not a directory")
    manager = LogManager(log_dirs, DEFAULTS)
    assert manager.offline_dirs == {log_dirs[2]} and manager.live_dirs == log_dirs[:2]
    first = manager.get_or_create_log("orders", 0)
    assert first.dir.parent == log_dirs[0]
    future = manager.create_future_log("orders", 0, log_dirs[1])
    assert future.is_future and future.dir.name.startswith("orders-0.") and future.dir.name.endswith("-future")
    # One log in each dir now (the future counts, as in Kafka): the tie goes to the first.
    assert manager.get_or_create_log("orders", 1).dir.parent == log_dirs[0]
    manager.maybe_update_preferred_log_dir("orders", 2, log_dirs[1])
    manager.maybe_update_preferred_log_dir("orders", 3, log_dirs[0])
    assert manager.get_or_create_log("orders", 3).dir.parent == log_dirs[0]
    assert manager.get_or_create_log("orders", 2).dir.parent == log_dirs[1]
    assert manager.resolve_log_dir(str(log_dirs[1])) == log_dirs[1]
    for path, code in [(log_dirs[2], ErrorCode.KAFKA_STORAGE_ERROR), (tmp_path / "nope", ErrorCode.LOG_DIR_NOT_FOUND)]:
        with pytest.raises(KafkaError) as refused:
            manager.resolve_log_dir(str(path))
        assert refused.value.code == code
    manager.shutdown()
    assert not (log_dirs[2].is_dir())
    reopened = LogManager(log_dirs, DEFAULTS)
    assert reopened.get_future_log("orders", 0).dir == future.dir
    assert sorted(log.partition for log in reopened.all_logs()) == [0, 1, 2, 3]


def test_a_fresh_dir_is_not_logged_as_an_unclean_shutdown(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    log_dirs = dirs(tmp_path, 1)
    with caplog.at_level("INFO", logger="loglake.storage.log_manager"):
        manager = LogManager(log_dirs, DEFAULTS)
    assert "unclean" not in caplog.text and "(no logs)" in caplog.text
    fill(manager, "orders", 0, 2)
    caplog.clear()
    with caplog.at_level("INFO", logger="loglake.storage.log_manager"):
        LogManager(log_dirs, DEFAULTS)  # no shutdown: a crash with a log to recover
    assert "(unclean shutdown)" in caplog.text
