"""One segment of a partition: `<base offset>.log` and its `.index`, `.timeindex` and
`.txnindex` (aborted transactions, see `transaction_index.py`).

Only the active (last) segment of a log is appended to. Every `index_interval_bytes`
appended bytes the segment adds an offset index entry (last offset of the batch -> its
position) and offers the time index its running max timestamp, exactly as Kafka's
LogSegment does, so lookups are a binary search plus a scan of a few batch headers.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Sequence
from pathlib import Path

from loglake.config import LogConfig
from loglake.errors import KafkaError
from loglake.record.header import HEADER_SIZE, peek_batch_size, validate_batch
from loglake.storage.file_records import BatchLocation, Bytes, FileRecords, LogSlice
from loglake.storage.index import CorruptIndexError
from loglake.storage.leader_epoch_cache import LeaderEpochFileCache
from loglake.storage.offset_index import INT32_MAX, OffsetIndex
from loglake.storage.time_index import NO_TIMESTAMP, TimeIndex
from loglake.storage.transaction_index import TXN_INDEX_SUFFIX, TransactionIndex

logger = logging.getLogger(__name__)

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
# A segment removed from its log, waiting file.delete.delay.ms before its files go.
DELETED_FILE_SUFFIX = ".deleted"

# Recovery reads the .log this much at a time (more when a single batch is bigger).
RECOVERY_CHUNK = 8 * 1024 * 1024
# How many recent batch boundaries a segment remembers (see LogSegment._boundaries).
RECENT_BOUNDARIES = 32
_NO_BOUNDARY = (-1, -1, -1)


def filename_prefix(offset: int) -> str:
    """Kafka's segment file name stem: the base offset as 20 zero-padded digits."""
    return f"{offset:020d}"


def now_ms() -> int:
    return time.time_ns() // 1_000_000


class LogSegment:
    """A segment's files. The constructor only opens them; `load` (or `open`, which
    constructs and loads) reads the state a segment keeps in memory, `recover` rebuilds
    it from the .log."""

    def __init__(
        self, dir: Path, base_offset: int, config: LogConfig, created_ms: int | None = None, file_suffix: str = ""
    ) -> None:
        """`file_suffix` (".cleaned", ".swap") names the files of a segment being swapped in."""
        self.base_offset = base_offset
        self.index_interval_bytes = config.index_interval_bytes
        self.created_ms = now_ms() if created_ms is None else created_ms
        stem = filename_prefix(base_offset)
        self.log = FileRecords(dir / (stem + LOG_SUFFIX + file_suffix))
        self.offset_index = OffsetIndex(
            dir / (stem + INDEX_SUFFIX + file_suffix), base_offset, config.segment_index_bytes
        )
        self.time_index = TimeIndex(
            dir / (stem + TIME_INDEX_SUFFIX + file_suffix), base_offset, config.segment_index_bytes
        )
        self.txn_index = TransactionIndex(dir / (stem + TXN_INDEX_SUFFIX + file_suffix))
        # Set by `recover` when it emptied the .txnindex of a segment holding markers: the
        # log's replay of markers must then start at or before this segment to refill it.
        self.txn_index_reset = False
        self._max_timestamp = NO_TIMESTAMP
        self._offset_of_max_timestamp = base_offset
        # Time-based rolling counts from the first batch's timestamp (Kafka's rule).
        self._rolling_based_timestamp: int | None = None
        self._bytes_since_last_index_entry = 0
        # (offset, position, generation): the batch at `position` (or the end of the file
        # there) is the first whose last offset reaches `offset`. Taken from appends and from
        # reads' ends, where the next fetch of a follower or consumer starts; a fetch starting
        # at one skips the scan from the index entry, which with one-record batches reads
        # dozens of headers. A ring of slots, each replaced whole: safe to read while the
        # loop thread appends. A truncation starts a new generation, so a boundary a reader
        # on another thread found before it and stores after it is never used.
        self._boundaries = [_NO_BOUNDARY] * RECENT_BOUNDARIES
        self._next_boundary = 0
        self._generation = 0

    @classmethod
    def open(
        cls,
        dir: Path,
        base_offset: int,
        config: LogConfig,
        leader_epoch_cache: LeaderEpochFileCache | None = None,
        created_ms: int | None = None,
    ) -> LogSegment:
        """Open or create the segment's files and load them."""
        segment = cls(dir, base_offset, config, created_ms)
        segment.load(leader_epoch_cache)
        return segment

    def load(self, leader_epoch_cache: LeaderEpochFileCache | None = None) -> None:
        """Trust the files, but verify: an index that is missing or fails its sanity
        check, or a tail that does not parse, means the segment is recovered instead."""
        try:
            self.sanity_check()
            self._load_state()
        except (CorruptIndexError, KafkaError) as exc:
            logger.warning("%s; recovering %s", exc, self.log.path)
            self.recover(leader_epoch_cache)

    def __repr__(self) -> str:
        return f"LogSegment(base_offset={self.base_offset}, size={self.size})"

    @property
    def size(self) -> int:
        return self.log.size

    @property
    def max_timestamp(self) -> int:
        """The largest batch max timestamp in the segment (NO_TIMESTAMP if none)."""
        return self._max_timestamp

    @property
    def offset_of_max_timestamp(self) -> int:
        return self._offset_of_max_timestamp

    @property
    def largest_timestamp(self) -> int:
        """What time-based retention compares: the max timestamp, else the file's mtime."""
        if self._max_timestamp >= 0:
            return self._max_timestamp
        return int(os.stat(self.log.path).st_mtime * 1000)

    def sanity_check(self) -> None:
        if self.log.size and not (self.offset_index.existed and self.time_index.existed):
            raise CorruptIndexError(f"index files of {self.log.path} are missing")
        self.offset_index.sanity_check(self.log.size)
        self.time_index.sanity_check()
        _ = self.txn_index.entries  # read now: a corrupt one means recovery, not a failed fetch later

    # Writing -----------------------------------------------------------------------------

    def should_roll(
        self, config: LogConfig, append_size: int, max_timestamp: int, largest_offset: int, now: int
    ) -> bool:
        """Whether an append of `append_size` bytes must go to a new segment instead."""
        size = self.log.size
        return (
            (size > 0 and size + append_size > config.segment_bytes)
            or (size > 0 and self.time_waited_for_roll(now, max_timestamp) > config.segment_ms)
            or self.offset_index.is_full
            or self.time_index.is_full
            or largest_offset - self.base_offset > INT32_MAX
        )

    def append(
        self,
        records: Bytes | Sequence[Bytes],
        largest_offset: int,
        max_timestamp: int,
        offset_of_max_timestamp: int,
        size: int | None = None,
    ) -> int:
        """Append batches (one buffer or pieces written back to back, `size` bytes if the
        caller knows); returns their position."""
        if not 0 <= largest_offset - self.base_offset <= INT32_MAX:
            raise ValueError(f"offset {largest_offset} does not fit segment {self.base_offset}")
        buffers = (records,) if isinstance(records, (bytes, bytearray, memoryview)) else records
        position = self.log.append(buffers, size)
        end = self.log.size
        self._account(position, end - position, largest_offset, max_timestamp, offset_of_max_timestamp)
        self._remember_boundary(largest_offset + 1, end, self._generation)
        return position

    def _remember_boundary(self, offset: int, position: int, generation: int) -> None:
        boundary = (offset, position, generation)
        if boundary in self._boundaries:
            return  # readers at the log end find the same one again and again
        slot = self._next_boundary
        self._boundaries[slot] = boundary
        self._next_boundary = (slot + 1) % RECENT_BOUNDARIES

    def _forget_boundaries(self) -> None:
        """The file's tail changed (truncation, recovery): positions past it mean nothing."""
        self._generation += 1
        self._boundaries[:] = [_NO_BOUNDARY] * RECENT_BOUNDARIES

    def _account(
        self, position: int, size: int, largest_offset: int, max_timestamp: int, offset_of_max_timestamp: int
    ) -> None:
        """Index bookkeeping for bytes just appended (or found by recovery) at `position`."""
        if max_timestamp > self._max_timestamp:
            self._max_timestamp, self._offset_of_max_timestamp = max_timestamp, offset_of_max_timestamp
        if self._rolling_based_timestamp is None and max_timestamp >= 0:
            self._rolling_based_timestamp = max_timestamp
        if self._bytes_since_last_index_entry > self.index_interval_bytes:
            if not self.offset_index.is_full:
                self.offset_index.append(largest_offset, position)
            self.time_index.maybe_append(self._max_timestamp, self._offset_of_max_timestamp)
            self._bytes_since_last_index_entry = 0
        self._bytes_since_last_index_entry += size

    def on_become_inactive(self) -> None:
        """The segment was rolled: its time index ends with its true max timestamp."""
        self.time_index.maybe_append(self._max_timestamp, self._offset_of_max_timestamp, skip_full_check=True)

    # Reading -----------------------------------------------------------------------------

    def translate_offset(self, offset: int, max_position: int | None = None) -> BatchLocation | None:
        """The first batch whose last offset is >= `offset`, if it lies wholly below
        `max_position` (default: the end of the file)."""
        limit = self.log.size if max_position is None else max_position
        return self._translate(offset, limit, self._generation)

    def _translate(self, offset: int, limit: int, generation: int) -> BatchLocation | None:
        start = -1
        for known_offset, position, known_generation in self._boundaries:
            if known_offset == offset and known_generation == generation:
                start = position
                break
        if not 0 <= start <= limit:
            start = self.offset_index.lookup(offset).position
        for batch in self.log.batches(start, limit):
            if batch.last_offset >= offset:
                return batch if batch.end <= limit else None
        return None

    def read(
        self, start_offset: int, max_size: int, max_position: int | None = None, min_one_message: bool = True
    ) -> LogSlice | None:
        """Whole batches from the one holding `start_offset`, at most `max_size` bytes
        (but the first batch whole when `min_one_message`), none reaching past
        `max_position`. None when no batch below `max_position` holds `start_offset` or a
        later offset; an empty slice when the first batch is too big and not `min_one_message`.
        """
        generation = self._generation
        limit = self.log.size if max_position is None else max_position
        first = self._translate(start_offset, limit, generation)
        if first is None:
            return None
        if first.size > max_size:
            if not min_one_message:
                return LogSlice.empty(start_offset)
            end, next_offset = first.end, first.next_offset
        else:
            end, next_offset = self._last_whole_batch(first, min(limit, first.position + max_size), generation)
        self._remember_boundary(next_offset, end, generation)
        return LogSlice(self.log, first.position, end - first.position, first.base_offset, next_offset)

    def _last_whole_batch(self, first: BatchLocation, limit: int, generation: int) -> tuple[int, int]:
        """(end, next offset) of the last batch from `first` on that ends at or below
        `limit` (`first` does)."""
        for known_offset, position, known_generation in self._boundaries:
            if position == limit and known_offset > first.last_offset and known_generation == generation:
                return limit, known_offset  # a boundary known to be there: nothing to scan
        last = self._last_batch_within(first, limit)
        return last.end, last.next_offset

    def _last_batch_within(self, first: BatchLocation, limit: int) -> BatchLocation:
        """The last batch from `first` on that ends at or below `limit` (`first` does). The
        index bounds the scan to about two index intervals."""
        start = max(first.position, self.offset_index.position_of_batch_ending_before(limit))
        last = first
        for batch in self.log.batches(start, limit):
            if batch.end > limit:
                break
            last = batch
        return last

    def find_offset_by_timestamp(
        self, timestamp: int, starting_offset: int = 0, max_position: int | None = None
    ) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record at or after `timestamp` whose offset is
        >= `starting_offset`, or None if this segment has none."""
        entry = self.time_index.lookup(timestamp)
        start = self.offset_index.lookup(max(entry.offset, starting_offset)).position
        limit = self.log.size if max_position is None else max_position
        return self.log.search_for_timestamp(timestamp, start, limit, starting_offset)

    def next_offset(self) -> int:
        """The offset after the last batch (the base offset when empty)."""
        next_offset = self.base_offset
        for batch in self.log.batches(self.offset_index.last_position, self.log.size):
            next_offset = batch.next_offset
        return next_offset

    # Recovery and truncation ------------------------------------------------------------

    def recover(self, leader_epoch_cache: LeaderEpochFileCache | None = None) -> int:
        """Rebuild both indexes from the .log, validating every batch (length, magic, CRC,
        increasing offsets); cut the file at the first invalid or torn batch. Returns the
        number of bytes cut. New leader epochs found in batches go to `leader_epoch_cache`."""
        self.offset_index.reset()
        self.time_index.reset()
        self.txn_index.reset()
        self.txn_index_reset = False
        self._max_timestamp, self._offset_of_max_timestamp = NO_TIMESTAMP, self.base_offset
        self._rolling_based_timestamp = None
        self._bytes_since_last_index_entry = 0
        size = self.log.size
        position, next_offset = 0, self.base_offset
        chunk, chunk_start = b"", 0
        while position < size:
            claimed = peek_batch_size(chunk, position - chunk_start) or 0
            needed = min(max(claimed, HEADER_SIZE), size - position)
            if position + needed > chunk_start + len(chunk):
                chunk_start = position
                chunk = self.log.read(position, max(needed, RECOVERY_CHUNK))
                continue
            try:
                header = validate_batch(chunk, position - chunk_start)
            except KafkaError as exc:
                logger.warning("%s: invalid batch at position %d: %s", self.log.path, position, exc.message)
                break
            if header.base_offset < next_offset or header.last_offset - self.base_offset > INT32_MAX:
                logger.warning(
                    "%s: batch at position %d has offsets %d..%d, out of order after %d",
                    self.log.path,
                    position,
                    header.base_offset,
                    header.last_offset,
                    next_offset,
                )
                break
            if leader_epoch_cache is not None:
                leader_epoch_cache.maybe_assign(header.partition_leader_epoch, header.base_offset)
            if header.is_control and header.producer_id >= 0:
                self.txn_index_reset = True  # it had a marker whose entry the log's replay must restore
            self._account(position, header.size, header.last_offset, header.max_timestamp, header.last_offset)
            position += header.size
            next_offset = header.next_offset
        if position == size:
            return 0
        logger.warning("%s: truncating %d bytes after position %d", self.log.path, size - position, position)
        self._forget_boundaries()
        return self.log.truncate_to(position)

    def truncate_to(self, offset: int) -> int:
        """Drop the batch holding `offset` and everything after it; returns bytes removed."""
        found = self.translate_offset(offset)
        if found is None:
            return 0
        self.offset_index.truncate_to(offset)
        self.time_index.truncate_to(offset)
        self.txn_index.truncate_to(offset)
        self._forget_boundaries()
        removed = self.log.truncate_to(found.position)
        self._load_state()
        return removed

    def _load_state(self) -> None:
        """Max timestamp, first timestamp and index spacing of existing data.

        The time index's last entry is the max as of the last offset index entry, so only
        the batches from that entry's position on need to be read.
        """
        last = self.time_index.last_entry
        self._max_timestamp, self._offset_of_max_timestamp = last.timestamp, last.offset
        start = self.offset_index.last_position
        for batch in self.log.batches(start, self.log.size):
            if batch.max_timestamp > self._max_timestamp:
                self._max_timestamp, self._offset_of_max_timestamp = batch.max_timestamp, batch.last_offset
        self._bytes_since_last_index_entry = self.log.size - start
        first = next(self.log.batches(0, self.log.size), None)
        self._rolling_based_timestamp = first.max_timestamp if first and first.max_timestamp >= 0 else None

    def time_waited_for_roll(self, now: int, max_timestamp: int) -> int:
        """How long the segment has been open by segment.ms' measure: from its first
        batch's timestamp to `max_timestamp`, or from its creation to `now` if no batch has one."""
        if self._rolling_based_timestamp is not None:
            return max_timestamp - self._rolling_based_timestamp
        return now - self.created_ms

    # Files -------------------------------------------------------------------------------

    def flush(self) -> None:
        self.log.flush()
        self.offset_index.flush()
        self.time_index.flush()
        self.txn_index.flush()

    def change_dir(self, dir: Path) -> None:
        """The partition directory was renamed; open descriptors stay valid."""
        for f in (self.log, self.offset_index, self.time_index, self.txn_index):
            f.path = dir / f.path.name

    def change_file_suffixes(self, old: str, new: str) -> None:
        """Rename the files from `<name><old>` to `<name><new>` (the swap of a cleaned
        segment, `.deleted` before removal). Indexes first, the .log last, so that a .log carrying a suffix means its
        indexes carry it too; each index is read into memory before its file moves, so a
        reader never opens a renamed path."""
        txn_path = self.txn_index.path
        self.txn_index.rename(txn_path.with_name(txn_path.name.removesuffix(old) + new))
        for f in (self.offset_index, self.time_index, self.log):
            if not isinstance(f, FileRecords):
                f.load()
            target = f.path.with_name(f.path.name.removesuffix(old) + new)
            f.path.rename(target)
            f.path = target

    def close(self) -> None:
        self.on_become_inactive()
        self.close_handlers()

    def close_handlers(self) -> None:
        """Close the files without writing to them (their disk failed)."""
        self.log.close()
        self.offset_index.close()
        self.time_index.close()

    def delete(self) -> None:
        """Remove the files. The .log descriptor stays open while a LogSlice needs it."""
        self.log.delete()
        self.offset_index.delete()
        self.time_index.delete()
        self.txn_index.delete()
