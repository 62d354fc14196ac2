"""Which log to clean next, and where each log's clean part ends (the role of Kafka's
LogCleanerManager).

Each log dir keeps `cleaner-offset-checkpoint`: per partition, the first dirty offset
(everything below was cleaned). A log is cleanable when its policy has compact and its
dirty ratio, dirty bytes / (clean + dirty bytes) by whole segments below the first
uncleanable offset, reaches min.cleanable.dirty.ratio; or when a tombstone's delete horizon
kept by its last cleaning has passed (KIP-534: the tombstone can go now). The filthiest
cleanable log goes first. A log is cleaned by one executor at a time (`in_progress`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from loglake.internal_topics import OFFSETS_TOPIC
from loglake.maintenance.cleaner import CleaningResult, cleanable_bytes, first_uncleanable_offset
from loglake.storage.checkpoints import CheckpointFileError, OffsetCheckpointFile
from loglake.storage.log import Log
from loglake.storage.log_manager import LogManager
from loglake.storage.segment import now_ms

CLEANER_OFFSET_CHECKPOINT = "cleaner-offset-checkpoint"

TopicPartition = tuple[str, int]


@dataclass(frozen=True)
class LogToClean:
    log: Log
    first_dirty_offset: int
    first_uncleanable_offset: int
    clean_bytes: int
    dirty_bytes: int
    horizon_passed: bool

    @property
    def dirty_ratio(self) -> float:
        total = self.clean_bytes + self.dirty_bytes
        return self.dirty_bytes / total if total else 0.0


@dataclass(frozen=True)
class CleaningSummary:
    """The last cleaning of a partition, as `topics describe` shows it."""

    executor: str
    finished_ms: int
    end_offset: int
    bytes_read: int
    bytes_written: int
    duration_ms: int


class LogCleanerManager:
    def __init__(self, log_manager: LogManager, high_watermark: Callable[[Log], int | None]) -> None:
        self._log_manager = log_manager
        self._high_watermark = high_watermark
        self._lock = threading.Lock()
        self._in_progress: set[TopicPartition] = set()
        self._checkpoints: dict[TopicPartition, int] = {}
        for log_dir in log_manager.live_dirs:
            try:
                self._checkpoints.update(OffsetCheckpointFile(log_dir / CLEANER_OFFSET_CHECKPOINT).read())
            except CheckpointFileError:
                pass  # cleaning then starts from each log's start: only costs work
        self._delete_horizons: dict[TopicPartition, int] = {}
        self.last_cleanings: dict[TopicPartition, CleaningSummary] = {}

    def log_to_clean(self, log: Log, now: int | None = None) -> LogToClean | None:
        """The cleanable range of `log` (None while the replica has no high watermark)."""
        now = now_ms() if now is None else now
        high_watermark = self._high_watermark(log)
        if high_watermark is None:
            return None
        key = (log.topic, log.partition)
        first_dirty = self._checkpoints.get(key, 0)
        if not log.log_start_offset <= first_dirty <= log.log_end_offset:
            first_dirty = log.log_start_offset
        first_uncleanable = max(first_dirty, first_uncleanable_offset(log, high_watermark, now))
        clean, dirty = cleanable_bytes(log, first_dirty, first_uncleanable)
        horizon = self._delete_horizons.get(key)
        return LogToClean(log, first_dirty, first_uncleanable, clean, dirty, horizon is not None and horizon <= now)

    def grab_filthiest_log(self, now: int | None = None) -> LogToClean | None:
        """The cleanable log with the highest dirty ratio, marked in progress; None if none."""
        now = now_ms() if now is None else now
        best: LogToClean | None = None
        with self._lock:
            for log in self._log_manager.all_logs():
                config = log.config
                key = (log.topic, log.partition)
                if not config.compact or key in self._in_progress:
                    continue
                if config.loglake_compaction_executor != "broker" and log.topic != OFFSETS_TOPIC:
                    continue
                candidate = self.log_to_clean(log, now)
                if candidate is None:
                    continue
                ready = candidate.dirty_bytes > 0 and candidate.dirty_ratio >= config.min_cleanable_dirty_ratio
                if not (ready or candidate.horizon_passed):
                    continue
                if best is None or candidate.dirty_ratio > best.dirty_ratio:
                    best = candidate
            if best is not None:
                self._in_progress.add((best.log.topic, best.log.partition))
        return best

    def try_begin(self, log: Log) -> bool:
        """Mark `log` in progress for another executor (the Spark plan); False if busy."""
        with self._lock:
            key = (log.topic, log.partition)
            if key in self._in_progress:
                return False
            self._in_progress.add(key)
            return True

    def done_cleaning(self, log: Log, executor: str, result: CleaningResult | None) -> None:
        """Release `log`; after a cleaning, checkpoint its first dirty offset."""
        key = (log.topic, log.partition)
        with self._lock:
            self._in_progress.discard(key)
            if result is None:
                return
            self._checkpoints[key] = max(self._checkpoints.get(key, 0), result.end_offset)
            if result.earliest_delete_horizon_ms is None:
                self._delete_horizons.pop(key, None)
            else:
                self._delete_horizons[key] = result.earliest_delete_horizon_ms
            stats = result.stats
            self.last_cleanings[key] = CleaningSummary(
                executor,
                now_ms(),
                result.end_offset,
                stats.bytes_read,
                stats.bytes_written,
                int(stats.elapsed_s * 1000),
            )
            self._write_checkpoint(log.dir.parent)

    def _write_checkpoint(self, log_dir: Path) -> None:
        hosted = {(log.topic, log.partition) for log in self._log_manager.all_logs() if log.dir.parent == log_dir}
        try:
            OffsetCheckpointFile(log_dir / CLEANER_OFFSET_CHECKPOINT).write(
                {k: v for k, v in self._checkpoints.items() if k in hosted}
            )
        except OSError as exc:
            self._log_manager.failure_channel.report(log_dir, f"writing {CLEANER_OFFSET_CHECKPOINT}", exc)

    def describe(self, log: Log) -> dict[str, Any]:
        """Dirty ratio and last cleaning of a compacted log (for `topics describe`)."""
        candidate = self.log_to_clean(log)
        last = self.last_cleanings.get((log.topic, log.partition))
        return {
            "dirty_ratio": None if candidate is None else round(candidate.dirty_ratio, 4),
            "first_dirty_offset": None if candidate is None else candidate.first_dirty_offset,
            # Where a cleaning must stop (active segment, LSO, min.compaction.lag.ms).
            "first_uncleanable_offset": None if candidate is None else candidate.first_uncleanable_offset,
            "last_cleaning": None
            if last is None
            else vars(last) | {"age_ms": int(time.time() * 1000) - last.finished_ms},
        }
