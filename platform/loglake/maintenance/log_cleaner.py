"""The broker's cleaner threads (the role of Kafka's LogCleaner).

`log.cleaner.enable` (default true) starts `log.cleaner.threads` threads; each takes the
filthiest cleanable log, builds its offset map within its share of
`log.cleaner.dedupe.buffer.size`, rewrites and swaps its segments, checkpoints, and sleeps
`log.cleaner.backoff.ms` when no log needs cleaning. Each cleaning is logged (bytes in and
out, duration) and counted. Plans made by the Spark executor run through `clean_with_plan`,
on the caller's thread, with the same core.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from loglake.maintenance.cleaner import (
    CleanerStats,
    CleaningResult,
    LogCleaningAborted,
    build_offset_map,
    clean_log,
)
from loglake.maintenance.cleaner_manager import LogCleanerManager, LogToClean
from loglake.maintenance.offset_map import OffsetMap, capacity_for
from loglake.storage.log import Log
from loglake.storage.segment import now_ms

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class CleanerConfig:
    """Kafka's broker configs of the log cleaner, with Kafka's defaults."""

    enable: bool = True
    threads: int = 1
    dedupe_buffer_size: int = 134217728
    backoff_ms: int = 15000

    @classmethod
    def from_properties(cls, props: Mapping[str, str]) -> CleanerConfig:
        base = cls()
        try:
            config = cls(
                enable=props.get("log.cleaner.enable", str(base.enable)).strip().lower() == "true",
                threads=int(props.get("log.cleaner.threads", base.threads)),
                dedupe_buffer_size=int(props.get("log.cleaner.dedupe.buffer.size", base.dedupe_buffer_size)),
                backoff_ms=int(props.get("log.cleaner.backoff.ms", base.backoff_ms)),
            )
        except ValueError as exc:
            raise ValueError(f"invalid log cleaner config: {exc}") from None
        if config.threads < 0 or config.dedupe_buffer_size < 1 or config.backoff_ms < 0:
            raise ValueError(f"invalid log cleaner config: {config}")
        return config


@dataclass
class CleanerCounters:
    cleanings: int = 0
    failures: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    seconds: float = 0.0


class LogCleaner:
    def __init__(self, config: CleanerConfig, manager: LogCleanerManager) -> None:
        self.config = config
        self.manager = manager
        self.counters = CleanerCounters()
        self._counters_lock = threading.Lock()
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._threads: list[threading.Thread] = []

    @property
    def map_capacity(self) -> int:
        return capacity_for(self.config.dedupe_buffer_size // max(1, self.config.threads))

    def startup(self) -> None:
        if not self.config.enable:
            return
        for i in range(self.config.threads):
            thread = threading.Thread(target=self._run, name=f"kafka-log-cleaner-thread-{i}", daemon=True)
            thread.start()
            self._threads.append(thread)

    def shutdown(self) -> None:
        self._stop.set()
        self._wake.set()
        for thread in self._threads:
            thread.join()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                cleaned = self.clean_filthiest_log()
            except Exception:
                logger.exception("log cleaner thread failed; backing off")
                cleaned = False
            if not cleaned:
                self._wake.wait(self.config.backoff_ms / 1000)
                self._wake.clear()

    def clean_filthiest_log(self) -> bool:
        """Clean the dirtiest cleanable log, if any; returns whether one was cleaned."""
        candidate = self.manager.grab_filthiest_log()
        if candidate is None:
            return False
        log = candidate.log
        result = None
        try:
            result = self._clean(candidate)
        except LogCleaningAborted as exc:
            logger.info("cleaning of %s-%d aborted: %s", log.topic, log.partition, exc)
        except Exception:
            with self._counters_lock:
                self.counters.failures += 1
            raise
        finally:
            self.manager.done_cleaning(log, "broker", result)
        return result is not None

    def _clean(self, candidate: LogToClean) -> CleaningResult:
        log = candidate.log
        stats = CleanerStats()
        offset_map = OffsetMap(self.map_capacity)
        try:
            build_offset_map(log, candidate.first_dirty_offset, candidate.first_uncleanable_offset, offset_map, stats)
            if offset_map.end_offset == candidate.first_dirty_offset and candidate.dirty_bytes:
                raise LogCleaningAborted(
                    f"not one batch of {log.topic}-{log.partition} fits log.cleaner.dedupe.buffer.size="
                    f"{self.config.dedupe_buffer_size}"
                )
            result = clean_log(log, offset_map, now_ms(), stats)
        except OSError as exc:
            raise log.storage_error("cleaning", exc) from exc  # its log dir goes offline
        self._record(log, "broker", result, candidate.dirty_ratio)
        return result

    def clean_with_plan(
        self, log: Log, keys: pa.Array, offsets: np.ndarray, end_offset: int, now: int
    ) -> CleaningResult:
        """Rewrite `log` below `end_offset` keeping the latest offset of each key that an
        external executor computed (`keys`, `offsets`), with `now` for delete horizons, so
        that every replica given the same plan writes the same bytes. Raises
        LogCleaningAborted if the broker's own cleaner is busy with the log."""
        if not self.manager.try_begin(log):
            raise LogCleaningAborted(f"{log.topic}-{log.partition} is being cleaned; retry")
        result = None
        try:
            stats = CleanerStats()
            try:
                result = clean_log(log, OffsetMap.of(keys, offsets, end_offset), now, stats)
            except OSError as exc:
                raise log.storage_error("cleaning", exc) from exc
            self._record(log, "spark", result, None)
            return result
        finally:
            self.manager.done_cleaning(log, "spark", result)

    def _record(self, log: Log, executor: str, result: CleaningResult, dirty_ratio: float | None) -> None:
        stats = result.stats
        with self._counters_lock:
            self.counters.cleanings += 1
            self.counters.bytes_read += stats.bytes_read
            self.counters.bytes_written += stats.bytes_written
            self.counters.seconds += stats.elapsed_s
        mb = 1024 * 1024
        elapsed = max(stats.elapsed_s, 1e-6)
        logger.info(
            "cleaned %s-%d up to offset %d (%s executor%s): %.1f MB in, %.1f MB out (%.0f%% smaller), "
            "%d of %d records kept, %d segments swapped, %.2f s, %.1f MB/s",
            log.topic,
            log.partition,
            result.end_offset,
            executor,
            "" if dirty_ratio is None else f", dirty ratio {dirty_ratio:.2f}",
            stats.bytes_read / mb,
            stats.bytes_written / mb,
            100 * (1 - stats.bytes_written / stats.bytes_read) if stats.bytes_read else 0,
            stats.records_retained,
            stats.records_read,
            stats.segments_swapped,
            elapsed,
            stats.bytes_read / mb / elapsed,
        )
