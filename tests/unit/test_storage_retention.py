"""Retention (Kafka's UnifiedLog.deleteOldSegments and LogManager.cleanupLogs): the
deletion rules, the high-watermark bound, `.deleted` files and their delayed removal,
rolling a quiet segment by segment.ms, and the scheduler that runs it all."""

from __future__ import annotations

import threading
import time
from dataclasses import replace
from pathlib import Path

from test_storage_support import make_batch

from loglake.config import LogConfig
from loglake.scheduler import Scheduler
from loglake.storage.checkpoints import LOG_START_OFFSET_CHECKPOINT, OffsetCheckpointFile
from loglake.storage.log import Log
from loglake.storage.log_manager import LogManager
from loglake.storage.segment import DELETED_FILE_SUFFIX

TINY = {"segment_bytes": 700, "index_interval_bytes": 60}
DEADLINE_S = 10


def open_log(tmp_path: Path, scheduler: Scheduler | None = None, **config: object) -> Log:
    return Log.open(tmp_path / "t-0", LogConfig(**{**TINY, **config}), scheduler=scheduler)


def fill(log: Log, count: int, timestamp: int = 10_000) -> None:
    for i in range(count):
        log.append_as_leader(make_batch(3, timestamp=timestamp + 100 * i, value_size=20, tag=i), leader_epoch=0)


def bases(log: Log) -> list[int]:
    return [s.base_offset for s in log.segments]


def files(log: Log, pattern: str) -> list[str]:
    return sorted(p.name for p in log.dir.glob(pattern))


def wait_until(condition, what: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def test_unlimited_retention_deletes_nothing(tmp_path: Path) -> None:
    log = open_log(tmp_path, retention_ms=-1, retention_bytes=-1)
    fill(log, 30)
    before = bases(log)
    assert log.delete_old_segments(log.log_end_offset, now=10**15) == 0
    assert bases(log) == before and log.log_start_offset == 0


def test_time_retention_deletes_segments_whose_largest_timestamp_is_too_old(tmp_path: Path) -> None:
    log = open_log(tmp_path, retention_ms=1000, retention_bytes=-1)
    fill(log, 30)
    segments = log.segments
    now = segments[3].max_timestamp + 1001  # segments 0..3 are more than 1000 ms old
    assert all(now - s.max_timestamp <= 1000 for s in segments[4:])
    assert log.delete_old_segments(log.log_end_offset, now=now) == 4
    assert log.log_start_offset == segments[4].base_offset == bases(log)[0]
    assert files(log, "*.log") == [f"{s.base_offset:020d}.log" for s in segments[4:]]
    # The log start moved with the segments: older offsets are out of range.
    assert log.read(log.log_start_offset, 10**6).first_offset == log.log_start_offset


def test_size_retention_deletes_oldest_segments_while_the_log_is_too_big(tmp_path: Path) -> None:
    log = open_log(tmp_path, retention_ms=-1, retention_bytes=2000)
    fill(log, 30)
    sizes = [s.size for s in log.segments]
    excess, expected = sum(sizes) - 2000, 0
    while excess >= sizes[expected]:
        excess -= sizes[expected]
        expected += 1
    assert expected >= 2
    assert log.delete_old_segments(log.log_end_offset) == expected
    assert log.size == sum(sizes[expected:])
    assert log.size - 2000 < log.segments[0].size  # one more deletion would go below the limit


def test_nothing_at_or_past_the_high_watermark_is_deleted(tmp_path: Path) -> None:
    log = open_log(tmp_path, retention_ms=0, retention_bytes=-1)
    fill(log, 30)
    before = bases(log)
    high_watermark = before[3] + 1  # inside segment 3: only 0..2 lie wholly below it
    assert log.delete_old_segments(high_watermark, now=10**15) == 3
    assert bases(log) == before[3:]
    assert log.log_start_offset <= high_watermark


def test_everything_expired_and_replicated_rolls_then_deletes_all(tmp_path: Path) -> None:
    log = open_log(tmp_path, retention_ms=0, retention_bytes=-1)
    fill(log, 30)
    end = log.log_end_offset
    assert log.delete_old_segments(end, now=10**15) > 0
    assert bases(log) == [end] and (log.log_start_offset, log.log_end_offset) == (end, end)
    fill(log, 1)
    assert log.log_end_offset > end


def test_compacted_topics_only_lose_segments_below_the_log_start(tmp_path: Path) -> None:
    log = open_log(tmp_path, retention_ms=0, retention_bytes=0)
    fill(log, 30)  # keyless records: written before the topic became compacted
    log.update_config(replace(log.config, cleanup_policy="compact"))
    before = bases(log)
    assert log.delete_old_segments(log.log_end_offset, now=10**15) == 0
    log.increment_log_start_offset(before[2] + 1)  # DeleteRecords: segments 0 and 1 go
    assert bases(log) == before[2:]
    assert log.delete_old_segments(log.log_end_offset, now=10**15) == 0


def test_segments_below_a_recovered_log_start_are_deleted(tmp_path: Path) -> None:
    log = open_log(tmp_path, retention_ms=-1)
    fill(log, 30)
    before = bases(log)
    log.close()
    reopened = Log.open(log.dir, log.config, log_start_offset=before[2] + 1)
    assert reopened.delete_old_segments(reopened.log_end_offset) == 2
    assert bases(reopened) == before[2:] and reopened.log_start_offset == before[2] + 1


def test_a_quiet_active_segment_rolls_after_segment_ms(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_ms=1000)
    fill(log, 1, timestamp=50_000)
    active = log.active_segment
    first_timestamp = active.max_timestamp  # of the one batch: segment.ms counts from it
    assert not log.roll_if_segment_ms_elapsed(now=first_timestamp + 1000)
    assert log.roll_if_segment_ms_elapsed(now=first_timestamp + 1001)
    assert log.active_segment is not active and log.active_segment.size == 0
    assert not log.roll_if_segment_ms_elapsed(now=10**15)  # an empty segment never rolls


def test_a_reader_holding_a_segment_finishes_while_its_files_wait_for_deletion(tmp_path: Path) -> None:
    scheduler = Scheduler()
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        held.set()
        release.wait()

    try:
        # The scheduler's thread is held, so the delayed deletion cannot run before we look.
        scheduler.schedule_once("hold", hold)
        assert held.wait(DEADLINE_S)
        log = open_log(tmp_path, scheduler, retention_ms=0, retention_bytes=-1, file_delete_delay_ms=1)
        fill(log, 30)
        first = log.segments[0]
        whole = log.read(0, 10**6)  # a fetch that already holds its slice of segment 0
        expected = whole.read_bytes()
        assert log.delete_old_segments(log.log_end_offset, now=10**15) > 0
        assert files(log, "*.log") == [f"{log.log_end_offset:020d}.log"]
        assert f"{first.base_offset:020d}.log.deleted" in files(log, "*.deleted")
        assert f"{first.base_offset:020d}.index.deleted" in files(log, "*.deleted")
        # Both the slice and a reader that looks the segment up again still read it.
        assert whole.read_bytes() == expected
        assert first.read(0, 10**6).read_bytes() == expected
        release.set()
        wait_until(lambda: not files(log, "*.deleted"), "the delayed deletion")
        assert whole.read_bytes() == expected  # its descriptor outlives the file
    finally:
        release.set()
        scheduler.shutdown()


def test_leftover_deleted_files_are_removed_at_open(tmp_path: Path) -> None:
    log = open_log(tmp_path, retention_ms=-1)
    fill(log, 30)
    first = log.segments[0]
    first.change_file_suffixes("", DELETED_FILE_SUFFIX)  # what a crash between rename and removal leaves
    log.close()
    reopened = Log.open(log.dir, log.config)
    assert not files(reopened, "*.deleted")
    assert reopened.log_start_offset == bases(reopened)[0] == log.segments[1].base_offset


def test_cleanup_logs_applies_retention_to_hosted_logs_and_checkpoints_the_log_start(tmp_path: Path) -> None:
    manager = LogManager([tmp_path / "logs"], LogConfig(**TINY, retention_ms=0, file_delete_delay_ms=0))
    hosted, unhosted = manager.get_or_create_log("a", 0), manager.get_or_create_log("b", 0)
    fill(hosted, 30)
    fill(unhosted, 30)
    manager.startup(
        lambda topic, partition: (hosted.log_end_offset, 0) if topic == "a" else None,
        retention_check_interval_ms=3_600_000,
        flush_check_interval_ms=3_600_000,
    )
    try:
        assert manager.cleanup_logs(now=10**15) > 0
        assert hosted.log_start_offset == hosted.log_end_offset
        assert unhosted.log_start_offset == 0  # its high watermark is unknown: left alone
        checkpoint = OffsetCheckpointFile(tmp_path / "logs" / LOG_START_OFFSET_CHECKPOINT).read()
        assert checkpoint[("a", 0)] == hosted.log_end_offset
    finally:
        manager.shutdown()


def test_scheduler_runs_periodic_and_delayed_tasks_and_drops_pending_ones_at_shutdown() -> None:
    scheduler = Scheduler()
    runs: list[str] = []
    third = threading.Event()

    def periodic() -> None:
        runs.append("periodic")
        if runs.count("periodic") == 3:
            third.set()

    scheduler.schedule("periodic", periodic, 0, 10)
    scheduler.schedule_once("failing", lambda: 1 / 0)  # logged; the thread goes on
    scheduler.schedule_once("later", lambda: runs.append("later"), 3_600_000)
    assert third.wait(DEADLINE_S)
    scheduler.shutdown()
    assert "later" not in runs
    count = len(runs)
    scheduler.schedule_once("after shutdown", lambda: runs.append("late"))
    assert len(runs) == count


def test_with_remote_storage_only_tiered_segments_go_by_local_retention(tmp_path: Path) -> None:
    # retention.ms unlimited, local.retention.ms 0: the local copy goes as soon as it is tiered.
    log = open_log(tmp_path, remote_storage_enable=True, retention_ms=-1, local_retention_ms=0)
    fill(log, 30)
    before = bases(log)
    end = log.log_end_offset
    assert log.delete_old_segments(end, now=10**15, tiered_offset=0) == 0  # nothing in the lake yet
    tiered = before[3] + 1  # inside segment 3: only 0..2 are wholly in the lake
    assert log.delete_old_segments(end, now=10**15, tiered_offset=tiered) == 3
    assert bases(log) == before[3:] and log.log_start_offset == before[3] <= tiered


def test_with_remote_storage_local_retention_minus_two_means_retention(tmp_path: Path) -> None:
    log = open_log(tmp_path, remote_storage_enable=True, retention_ms=-1, local_retention_ms=-2)
    fill(log, 30)
    assert log.delete_old_segments(log.log_end_offset, now=10**15, tiered_offset=log.log_end_offset) == 0
    sized = Log.open(
        tmp_path / "s-0", LogConfig(**TINY, remote_storage_enable=True, retention_bytes=10**9, local_retention_bytes=0)
    )
    fill(sized, 30)
    end = sized.log_end_offset
    assert sized.delete_old_segments(end, now=0, tiered_offset=end) > 0
    assert sized.log_start_offset == end
