"""One partition's log, `<log.dir>/<topic>-<partition>/` (the role of Kafka's UnifiedLog).

Appends validate every batch before writing any, assign offsets by rewriting each
batch's 61-byte header (a copy of the header; the payload is written straight from the
caller's buffer and never changed), and roll segments by size, time or full index. A
lock per log serialises appends, truncation and rolls; reads take no lock. Writers
publish the log end as one immutable `LogOffsetMetadata` after the bytes are written,
and replace (never mutate) the segment list, so a reader sees only whole appends.

Batches with a producer id are checked against the idempotent producers' state (see
`producer_state.py`): a retried batch is not written again but answered with the offsets
it got the first time.

Transactions: a COMMIT/ABORT marker (appended by the transaction coordinator's
WriteTxnMarkers, or replicated) closes its producer's open transaction; an ABORT adds the
transaction to the `.txnindex` of the segment holding the marker. `first_unstable_offset`
is the first offset of the oldest open transaction, bounding the LSO. Recovery rebuilds
both: the producer state replay re-reads the markers after the snapshot it starts from,
and starts no later than the first segment whose `.txnindex` recovery emptied.
"""

from __future__ import annotations

import functools
import logging
import re
import shutil
import struct
import threading
import time
import uuid
from bisect import bisect_right
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from operator import attrgetter
from pathlib import Path
from typing import Concatenate, NamedTuple, ParamSpec, TypeVar

from loglake.config import LogConfig
from loglake.errors import ErrorCode, KafkaError
from loglake.record.batch import CheckedBatches
from loglake.record.columns import check_keyed
from loglake.record.control import decode_marker
from loglake.record.header import (
    ATTRIBUTES_POS,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC_POS,
    TIMESTAMP_TYPE_MASK,
    RecordBatchHeader,
    peek_batch_size,
    set_base_offset,
    set_crc,
    set_partition_leader_epoch,
    validate_batch,
)
from loglake.scheduler import Scheduler
from loglake.storage.checkpoints import CheckpointFileError
from loglake.storage.file_records import SCAN_CHUNK, Bytes, FileRecords, LogSlice
from loglake.storage.fileutil import fsync_dir, remove_temp_files
from loglake.storage.leader_epoch_cache import LEADER_EPOCH_CHECKPOINT, LeaderEpochFileCache
from loglake.storage.log_dir_failure import LogDirFailureChannel
from loglake.storage.producer_state import BatchMetadata, LastRecord, ProducerStateManager, sync_snapshot
from loglake.storage.segment import DELETED_FILE_SUFFIX, LogSegment, now_ms
from loglake.storage.segment_swap import complete_interrupted_swaps, swap_in
from loglake.storage.time_index import NO_TIMESTAMP
from loglake.storage.transaction_index import AbortedTxn

logger = logging.getLogger(__name__)

_SEGMENT_FILE = re.compile(r"^(\d{20})\.(log|index|timeindex|txnindex)$")
FUTURE_DIR_SUFFIX = "-future"
_FUTURE_DIR = re.compile(r"^(.+)\.[0-9a-f]{32}" + FUTURE_DIR_SUFFIX + "$")
# attributes int16, then (after lastOffsetDelta) baseTimestamp and maxTimestamp int64s.
_ATTRIBUTES = struct.Struct(">h")
_TIMESTAMPS = struct.Struct(">qq")
_BASE_TIMESTAMP_POS = 27
# baseOffset, batchLength, partitionLeaderEpoch: the bytes before magic (MAGIC_POS).
_OFFSET_LENGTH_EPOCH = struct.Struct(">qii")

# Rolled segments are fsynced off the append path, as Kafka's "flush-log" task does.
_flusher = ThreadPoolExecutor(max_workers=1, thread_name_prefix="loglake-flush")


_P = ParamSpec("_P")
_R = TypeVar("_R")


def _storage_op(
    what: str, check_online: bool = True
) -> Callable[[Callable[Concatenate[Log, _P], _R]], Callable[Concatenate[Log, _P], _R]]:
    """Route an OSError of the method to the log's failure channel (its dir goes offline)
    and raise KAFKA_STORAGE_ERROR instead; with `check_online`, refuse at once when the
    dir is offline already, so nothing more is tried on a failed disk."""

    def wrap(method: Callable[Concatenate[Log, _P], _R]) -> Callable[Concatenate[Log, _P], _R]:
        @functools.wraps(method)
        def run(self: Log, /, *args: _P.args, **kwargs: _P.kwargs) -> _R:
            channel = self.failure_channel
            if check_online and channel is not None:
                channel.check_online(self._log_dir)
            try:
                return method(self, *args, **kwargs)
            except OSError as exc:
                raise self.storage_error(what, exc) from exc

        return run

    return wrap


def parse_topic_partition(name: str) -> tuple[str, int] | None:
    """`my-topic-3` -> ("my-topic", 3): the partition follows the last '-'."""
    topic, sep, partition = name.rpartition("-")
    if not sep or not topic or not partition.isdigit():
        return None
    return topic, int(partition)


def future_log_dir_name(topic: str, partition: int) -> str:
    """`<topic>-<partition>.<uuid>-future`: a replica being moved here from another log dir."""
    return f"{topic}-{partition}.{uuid.uuid4().hex}{FUTURE_DIR_SUFFIX}"


def parse_future_topic_partition(name: str) -> tuple[str, int] | None:
    """The partition of a future log's directory name; None for any other name."""
    match = _FUTURE_DIR.match(name)
    return None if match is None else parse_topic_partition(match.group(1))


def _topic_partition_of(dir: Path) -> tuple[str, int]:
    parsed = parse_topic_partition(dir.name) or parse_future_topic_partition(dir.name)
    if parsed is None:
        raise ValueError(f"{dir} is not named <topic>-<partition>")
    return parsed


# NamedTuples, not frozen dataclasses: one of each is made per append, and a frozen
# dataclass's __init__ sets its fields one object.__setattr__ at a time.
class LogAppendInfo(NamedTuple):
    """What an append did. `offset_of_max_timestamp` is the last offset of the batch that
    holds the max timestamp (Kafka's "shallow" offset, what the time index records).

    `duplicate`: the append was an idempotent producer's retry of a batch already in the
    log. Nothing was written; first/last offset, max timestamp and log append time are
    those of the original batch, so a caller answers the retry exactly like the original.
    """

    first_offset: int
    last_offset: int
    max_timestamp: int
    offset_of_max_timestamp: int
    log_append_time_ms: int
    num_batches: int
    num_records: int
    valid_bytes: int
    duplicate: bool = False


class LogOffsetMetadata(NamedTuple):
    """An offset with where it falls: the segment's base offset and the byte position."""

    offset: int
    segment_base_offset: int
    position: int


class Log:
    def __init__(
        self,
        dir: Path,
        config: LogConfig,
        segments: list[LogSegment],
        log_start_offset: int,
        recovery_point: int,
        leader_epoch_cache: LeaderEpochFileCache,
        scheduler: Scheduler | None = None,
    ) -> None:
        self.topic, self.partition = _topic_partition_of(dir)
        # Runs the delayed deletion of removed segments' files; without one they go at once.
        self._scheduler = scheduler
        self._dir = dir
        self._log_dir = dir.parent  # the log dir holding it, asked on every storage call
        self._config = config
        self._segments = segments
        self._log_start_offset = log_start_offset
        self._recovery_point = recovery_point
        self._epochs = leader_epoch_cache
        self._lock = threading.Lock()
        self._end = LogOffsetMetadata(segments[-1].next_offset(), segments[-1].base_offset, segments[-1].size)
        self._truncations = 0  # lets a flush that raced a truncation leave the recovery point alone
        self._dir_dirty = False  # segment files were created since the directory was fsynced
        self._last_flush_ms = now_ms()
        self._pending_flushes: list[Future[None]] = []
        # Told each flush's seconds (the broker's flush-time histogram); set by the LogManager.
        self.on_flush: Callable[[float], None] | None = None
        self._producers = ProducerStateManager(dir)  # loaded by open()
        # The producer state's first unstable offset, published for lock-free readers.
        self._first_unstable: int | None = None
        # Where this log's I/O errors go (set by the LogManager); None: they only raise.
        self.failure_channel: LogDirFailureChannel | None = None

    @classmethod
    def open(
        cls,
        dir: str | Path,
        config: LogConfig,
        recovery_point: int = 0,
        log_start_offset: int = 0,
        had_clean_shutdown: bool = False,
        scheduler: Scheduler | None = None,
    ) -> Log:
        """Load (or create) the log in `dir`.

        Indexes that are missing or fail their sanity check are rebuilt. Unless the
        shutdown was clean, every segment from the one holding `recovery_point` on is
        recovered: batches re-validated, indexes rebuilt, a torn or corrupt tail cut off
        (and the segments after it deleted). Files of segments whose deletion a crash
        interrupted (`.deleted`) are removed.
        """
        dir = Path(dir)
        _topic_partition_of(dir)  # before creating anything
        if not dir.exists():
            dir.mkdir(parents=True)
            fsync_dir(dir.parent)
        remove_temp_files(dir)
        try:
            epochs = LeaderEpochFileCache(dir / LEADER_EPOCH_CHECKPOINT)
        except CheckpointFileError as exc:
            # The batches carry their leader epochs: recovering every segment refills it.
            logger.warning("%s; rebuilding it from the log, whose segments are all recovered", exc)
            (dir / LEADER_EPOCH_CHECKPOINT).unlink()
            epochs = LeaderEpochFileCache(dir / LEADER_EPOCH_CHECKPOINT)
            had_clean_shutdown, recovery_point = False, 0
        complete_interrupted_swaps(dir)
        segments = _load_segments(dir, config, epochs, None if had_clean_shutdown else recovery_point)
        if not segments:
            segments = [LogSegment.open(dir, log_start_offset, config)]
        log = cls(dir, config, segments, max(log_start_offset, segments[0].base_offset), 0, epochs, scheduler)
        if log._log_start_offset > log.log_end_offset:
            log.truncate_fully_and_start_at(log._log_start_offset)
        log._recovery_point = min(recovery_point, log.log_end_offset)
        epochs.truncate_from_end(log.log_end_offset)
        epochs.truncate_from_start(log._log_start_offset)
        reset = [s.base_offset for s in log._segments if s.txn_index_reset]
        log._load_producer_state(min(reset) if reset else None)
        log._producers.remove_expired_producers(now_ms())
        return log

    def __repr__(self) -> str:
        return f"Log({self.topic}-{self.partition}, start={self.log_start_offset}, end={self.log_end_offset})"

    def storage_error(self, what: str, cause: OSError) -> KafkaError:
        """Report an I/O error of this log (its dir goes offline); the error to raise."""
        message = f"{what} {self.topic}-{self.partition} in {self._log_dir}"
        if self.failure_channel is None:
            return KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, f"{message} failed: {cause}")
        return self.failure_channel.report(self._log_dir, message + " failed", cause)

    # State -------------------------------------------------------------------------------

    @property
    def dir(self) -> Path:
        return self._dir

    @property
    def log_dir(self) -> Path:
        """The log dir holding this partition's directory (`dir.parent`, kept: a broker's
        checkpoints group thousands of logs by it every few seconds)."""
        return self._log_dir

    @property
    def is_future(self) -> bool:
        """A copy being filled in another log dir, to replace the current log (KIP-113)."""
        return parse_future_topic_partition(self._dir.name) is not None

    @property
    def config(self) -> LogConfig:
        return self._config

    def update_config(self, config: LogConfig) -> None:
        """Takes effect from the next append; index settings apply to new segments."""
        self._config = config

    @property
    def log_start_offset(self) -> int:
        return self._log_start_offset

    @property
    def log_end_offset(self) -> int:
        """The LEO: the offset the next appended record gets."""
        return self._end.offset

    @property
    def log_end_offset_metadata(self) -> LogOffsetMetadata:
        return self._end

    @property
    def online(self) -> bool:
        """Whether the log's dir is online (what every storage call checks first)."""
        channel = self.failure_channel
        return channel is None or not channel.is_offline(self._log_dir)

    @property
    def recovery_point(self) -> int:
        """Every offset below it is on disk (fsynced); restart recovery starts here."""
        return self._recovery_point

    @property
    def last_flush_ms(self) -> int:
        return self._last_flush_ms

    @property
    def segments(self) -> tuple[LogSegment, ...]:
        return tuple(self._segments)

    @property
    def active_segment(self) -> LogSegment:
        return self._segments[-1]

    @property
    def size(self) -> int:
        return sum(s.size for s in self._segments)

    def start_and_size(self) -> tuple[int, int]:
        """The log start offset and the bytes from it, read together: retention moves the
        start and drops segments in one step, which a reader of both must not split."""
        with self._lock:
            return self._log_start_offset, self.size

    @property
    def leader_epoch_cache(self) -> LeaderEpochFileCache:
        return self._epochs

    @property
    def latest_epoch(self) -> int | None:
        return self._epochs.latest_epoch

    @property
    def producer_state(self) -> ProducerStateManager:
        """The idempotent producers' state; change it only through the log."""
        return self._producers

    @property
    def first_unstable_offset(self) -> int | None:
        """The first offset of the oldest open transaction; None when none is open."""
        return self._first_unstable

    def last_stable_offset(self, high_watermark: int) -> int:
        """The LSO: read_committed consumers read below it."""
        first_unstable = self._first_unstable
        return high_watermark if first_unstable is None else min(first_unstable, high_watermark)

    def collect_aborted_transactions(self, fetch_offset: int, upper_bound_offset: int) -> list[AbortedTxn]:
        """The aborted transactions a read_committed fetch of [fetch_offset,
        upper_bound_offset) must be told about, from the segments' `.txnindex`."""
        segments = self._segments
        first = max(0, bisect_right(segments, fetch_offset, key=attrgetter("base_offset")) - 1)
        aborted: list[AbortedTxn] = []
        for segment in segments[first:]:
            # A transaction begun below the bound may end in any later segment.
            found, complete = segment.txn_index.collect(fetch_offset, upper_bound_offset)
            aborted.extend(found)
            if complete:
                break
        return aborted

    @_storage_op("writing the leader epochs of")
    def assign_leader_epoch(self, epoch: int, start_offset: int) -> None:
        """A new leader epoch starts at `start_offset` (normally the LEO on election)."""
        with self._lock:
            self._epochs.assign(epoch, start_offset)

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """OffsetForLeaderEpoch: (epoch, end offset), or (-1, -1) if unknown."""
        return self._epochs.end_offset_for(epoch, self.log_end_offset)

    # Appending ---------------------------------------------------------------------------

    @_storage_op("append to")
    def append_as_leader(
        self,
        records: Bytes | CheckedBatches,
        leader_epoch: int,
        now_ms: int | None = None,
        *,
        from_coordinator: bool = False,
    ) -> LogAppendInfo:
        """Validate, assign offsets to and append one request's batches (all or nothing).
        Batches a produce request's check passed (CheckedBatches) are not parsed and
        CRC-checked again, only held to this log's limits.

        Raises KafkaError: CORRUPT_MESSAGE (framing, magic, CRC), INVALID_RECORD (record
        count does not match the offset delta, or a record without a key on a compacted
        topic, as Kafka's LogValidator), MESSAGE_TOO_LARGE (a batch over
        max.message.bytes), RECORD_LIST_TOO_LARGE (more than segment.bytes in one append),
        and for batches with a producer id what `ProducerStateManager.validate_append`
        raises (INVALID_PRODUCER_EPOCH, OUT_OF_ORDER_SEQUENCE_NUMBER, INVALID_RECORD).
        A retry of one of a producer's last five batches writes nothing and returns the
        original batch's offsets with `duplicate=True`. Transaction markers (control
        batches) are accepted only `from_coordinator` (WriteTxnMarkers).
        With message.timestamp.type=LogAppendTime every batch is stamped with `now_ms`.
        """
        config = self._config
        if isinstance(records, CheckedBatches):
            view = records.view
            batches = records.batches
            _check_leader_limits(batches, len(view), config)
        else:
            view = _byte_view(records)
            batches = _validate(view, config, for_leader=True)
        if config.compact:
            check_keyed(view, f"{self.topic}-{self.partition}")
        now = _now(now_ms)
        log_append_time = config.message_timestamp_type == "LogAppendTime"
        # Only appends holding an idempotent producer's batch pay for producer state.
        producer_headers = None
        for _, header in batches:
            if header.producer_id >= 0:
                producer_headers = [h for _, h in batches]
                break
        with self._lock, self._undone_on_io_error():
            if producer_headers is not None:
                duplicate = self._producers.validate_append(producer_headers, from_coordinator)
                if duplicate is not None:
                    return _duplicate_append_info(duplicate, producer_headers[0], log_append_time, len(view))
            first_offset = offset = self._end.offset
            self._epochs.maybe_assign(leader_epoch, first_offset)
            max_timestamp, offset_of_max = NO_TIMESTAMP, first_offset
            record_count = 0
            for position, header in batches:
                record_count += header.record_count
                last_offset = offset + header.last_offset_delta
                size = header.size
                if log_append_time:
                    data: Bytes | tuple[Bytes, ...] = _stamp_whole_batch(
                        view, position, size, offset, leader_epoch, now
                    )
                    batch_max = now
                else:
                    data = _stamp_header(view, position, size, offset, leader_epoch)
                    batch_max = header.max_timestamp
                self._append_batch(data, size, offset, last_offset, batch_max, now)
                if batch_max > max_timestamp:
                    max_timestamp, offset_of_max = batch_max, last_offset
                offset = last_offset + 1
            if producer_headers is not None:
                self._producers.on_leader_append(producer_headers, first_offset, now if log_append_time else None)
                if from_coordinator:
                    marker_offset = first_offset
                    for position, header in batches:
                        if header.is_control:
                            self._complete_txn(view[position : position + header.size], header, marker_offset)
                        marker_offset += header.last_offset_delta + 1
                self._first_unstable = self._producers.first_unstable_offset
            flush = self._finish_append(offset)
        if flush:
            self.flush()
        return LogAppendInfo(
            first_offset,
            offset - 1,
            max_timestamp,
            offset_of_max,
            now if log_append_time else -1,
            len(batches),
            record_count,
            len(view),
        )

    @_storage_op("append to")
    def append_as_follower(self, records: Bytes) -> LogAppendInfo:
        """Append batches replicated from the leader, keeping their offsets and epochs.

        Each batch must start at or after the end of the one before it (the first at or
        after the LEO; gaps are allowed, as compaction leaves them), else INVALID_RECORD.
        Producer state follows the batches unchecked: the leader validated them.
        """
        view = _byte_view(records)
        batches = _validate(view, self._config, for_leader=False)
        now = now_ms()
        with self._lock, self._undone_on_io_error():
            expected = self._end.offset
            max_timestamp, offset_of_max = NO_TIMESTAMP, -1
            for _, header in batches:
                if header.base_offset < expected:
                    raise KafkaError(
                        ErrorCode.INVALID_RECORD,
                        f"batch at offset {header.base_offset} would follow offset {expected - 1} "
                        f"in {self.topic}-{self.partition}",
                    )
                expected = header.next_offset
            first_offset = batches[0][1].base_offset
            for position, header in batches:
                self._epochs.maybe_assign(header.partition_leader_epoch, header.base_offset)
                data = view[position : position + header.size]
                self._append_batch(data, header.size, header.base_offset, header.last_offset, header.max_timestamp, now)
                if header.max_timestamp > max_timestamp:
                    max_timestamp, offset_of_max = header.max_timestamp, header.last_offset
            for position, header in batches:
                if header.producer_id < 0:
                    continue
                if header.is_control:
                    self._complete_txn(view[position : position + header.size], header, header.base_offset)
                else:
                    self._producers.on_batch_in_log(header)
            self._first_unstable = self._producers.first_unstable_offset
            flush = self._finish_append(expected)
        if flush:
            self.flush()
        return LogAppendInfo(
            first_offset,
            expected - 1,
            max_timestamp,
            offset_of_max,
            -1,
            len(batches),
            sum(h.record_count for _, h in batches),
            len(view),
        )

    def _append_batch(
        self,
        data: Bytes | tuple[Bytes, ...],
        size: int,
        base_offset: int,
        last_offset: int,
        max_timestamp: int,
        now: int,
    ) -> None:
        segment = self._segments[-1]
        if segment.should_roll(self._config, size, max_timestamp, last_offset, now):
            segment = self._roll(base_offset, now)
        segment.append(data, last_offset, max_timestamp, last_offset, size)

    def _complete_txn(self, batch: Bytes, header: RecordBatchHeader, marker_offset: int) -> None:
        """A marker at `marker_offset` is in the log: end its producer's transaction and
        index it if it aborted (in the segment holding the marker)."""
        if not header.record_count:
            return  # a marker the cleaner emptied: its transaction's data is gone (Kafka skips it too)
        marker = decode_marker(batch)
        completed = self._producers.complete_txn(
            header.producer_id, header.producer_epoch, marker.commit, marker_offset, header.max_timestamp
        )
        if completed is not None and completed.is_aborted:
            segments = self._segments
            segment = segments[max(0, bisect_right(segments, marker_offset, key=attrgetter("base_offset")) - 1)]
            segment.txn_index.append(
                AbortedTxn(
                    completed.producer_id, completed.first_offset, completed.last_offset, completed.last_stable_offset
                )
            )

    def _undone_on_io_error(self) -> _UndoneOnIoError:
        """Keep an append all or nothing when the disk fails midway: cut what it wrote
        (the caller's `_storage_op` then takes the dir offline). Entered with the lock held."""
        return _UndoneOnIoError(self)

    def _undo_append(self, start: int) -> None:
        try:
            self._truncate_locked(start)
        except OSError:
            # Recovery at the next start cuts it: the recovery point is below it.
            logger.exception("could not undo a failed append to %s", self._dir)

    def _finish_append(self, next_offset: int) -> bool:
        """Publish the new log end; returns whether flush.messages asks for a flush."""
        active = self._segments[-1]
        self._end = LogOffsetMetadata(next_offset, active.base_offset, active.size)
        return next_offset - self._recovery_point >= self._config.flush_messages

    # Reading -----------------------------------------------------------------------------

    @_storage_op("read of")
    def read(
        self, start_offset: int, max_bytes: int, max_offset: int | None = None, min_one_message: bool = True
    ) -> LogSlice:
        """Whole batches from the one holding `start_offset`, within `max_bytes`.

        With `min_one_message` the first batch is returned whole even if bigger than
        `max_bytes` (KIP-74); without it such a read is empty. No batch holding an offset
        >= `max_offset` (exclusive bound, e.g. the high watermark) is returned. Reading at
        the LEO (or at/after `max_offset`) gives an empty slice; `start_offset` outside
        [log start, LEO] raises KafkaError(OFFSET_OUT_OF_RANGE).
        """
        # Order matters against writers: the end is published after the segment list
        # grows, and the log start moves before segments are dropped.
        end = self._end
        segments = self._segments
        log_start = self._log_start_offset
        if start_offset < log_start or start_offset > end.offset:
            raise KafkaError(
                ErrorCode.OFFSET_OUT_OF_RANGE,
                f"offset {start_offset} is outside [{log_start}, {end.offset}] for {self.topic}-{self.partition}",
            )
        if start_offset == end.offset or (max_offset is not None and start_offset >= max_offset):
            return LogSlice.empty(start_offset)
        index = max(0, bisect_right(segments, start_offset, key=attrgetter("base_offset")) - 1)
        for i in range(index, len(segments)):
            segment = segments[i]
            if segment.base_offset > end.segment_base_offset or (
                max_offset is not None and segment.base_offset >= max_offset
            ):
                break
            limit = end.position if segment.base_offset == end.segment_base_offset else segment.size
            next_base = segments[i + 1].base_offset if i + 1 < len(segments) else None
            if max_offset is not None and max_offset < end.offset and (next_base is None or max_offset < next_base):
                # The batch holding max_offset and everything after it stay hidden.
                bound = segment.translate_offset(max_offset, limit)
                if bound is not None:
                    limit = bound.position
            found = segment.read(start_offset, max_bytes, limit, min_one_message)
            if found is not None:
                return found
        return LogSlice.empty(start_offset)

    @_storage_op("read of")
    def fetch_offset_by_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record with a timestamp >= `timestamp`: the
        first batch whose max timestamp reaches it, then the first such record in it.
        None if no record is that recent. (ListOffsets' -1/-2 are the caller's.)"""
        end = self._end
        segments = self._segments
        log_start = self._log_start_offset
        for segment in segments:
            if segment.base_offset > end.segment_base_offset:
                break
            if segment.max_timestamp < timestamp:
                continue
            limit = end.position if segment.base_offset == end.segment_base_offset else segment.size
            found = segment.find_offset_by_timestamp(timestamp, log_start, limit)
            if found is not None:
                return found
        return None

    # Segments ----------------------------------------------------------------------------

    @_storage_op("roll of")
    def roll(self, now_ms: int | None = None) -> LogSegment:
        """Start a new active segment at the LEO (no-op when the active one is empty)."""
        with self._lock:
            segment = self._roll(self._end.offset, _now(now_ms))
            self._end = LogOffsetMetadata(self._end.offset, segment.base_offset, segment.size)
            return segment

    def _roll(self, base_offset: int, now: int) -> LogSegment:
        active = self._segments[-1]
        if active.size == 0 and active.base_offset == base_offset:
            return active
        active.on_become_inactive()
        segment = LogSegment.open(self._dir, base_offset, self._config, created_ms=now)
        self._segments = [*self._segments, segment]
        self._dir_dirty = True
        self._pending_flushes = [f for f in self._pending_flushes if not f.done()]
        self._pending_flushes.append(_flusher.submit(self._flush_in_background, base_offset))
        # Kafka snapshots producer state at every roll, so a restart after a crash replays
        # at most about a segment of headers. A roll in the middle of an append happens
        # before the producer state takes in that append's batches, so the snapshot is of
        # the published end, which is what the state covers.
        self._producers.remove_expired_producers(now)
        snapshot = self._producers.take_snapshot(self._end.offset, sync=False)
        self._pending_flushes.append(_flusher.submit(self._sync_snapshot_in_background, snapshot))
        return segment

    @_storage_op("roll of")
    def roll_if_segment_ms_elapsed(self, now: int | None = None) -> bool:
        """Roll a non-empty active segment older than segment.ms even though nothing is
        appended (a quiet topic), so retention and tiering can take it. Returns whether it rolled."""
        now = _now(now)
        with self._lock:
            active = self._segments[-1]
            if active.size == 0 or active.time_waited_for_roll(now, now) <= self._config.segment_ms:
                return False
            self._roll(self._end.offset, now)
            self._end = LogOffsetMetadata(self._end.offset, self._segments[-1].base_offset, 0)
            return True

    @_storage_op("retention of")
    def delete_old_segments(self, high_watermark: int, now: int | None = None, tiered_offset: int = 0) -> int:
        """Kafka's UnifiedLog.deleteOldSegments: delete the oldest segments wholly below the
        log start offset; then, if cleanup.policy has `delete`, the oldest while the log
        exceeds retention.bytes and those whose largest timestamp is more than
        retention.ms old (-1: no limit). Only segments wholly below `high_watermark` go,
        so the log start never passes it. With remote.storage.enable the limits are
        local.retention.bytes / local.retention.ms (-2: the retention.* value) and only
        segments wholly below `tiered_offset` (already in the lake) go, so the lake and the
        log never leave a gap between them. Returns how many segments were deleted."""
        now = _now(now)
        config = self._config
        retention_bytes, retention_ms = config.retention_bytes, config.retention_ms
        bound = high_watermark
        if config.remote_storage_enable:
            if config.local_retention_bytes != -2:
                retention_bytes = config.local_retention_bytes
            if config.local_retention_ms != -2:
                retention_ms = config.local_retention_ms
            bound = min(high_watermark, tiered_offset)
        with self._lock:
            deleted = self._delete_below_high_watermark(
                bound, lambda s, nxt: nxt is not None and nxt.base_offset <= self._log_start_offset
            )
            if not config.delete:
                return deleted
            if retention_bytes >= 0:
                excess = sum(s.size for s in self._segments) - retention_bytes

                def over_size(segment: LogSegment, _: LogSegment | None) -> bool:
                    nonlocal excess
                    if excess < segment.size:
                        return False
                    excess -= segment.size
                    return True

                deleted += self._delete_below_high_watermark(bound, over_size)
            if retention_ms >= 0:
                deleted += self._delete_below_high_watermark(
                    bound, lambda s, _: now - s.largest_timestamp > retention_ms
                )
            return deleted

    def _delete_below_high_watermark(
        self, high_watermark: int, predicate: Callable[[LogSegment, LogSegment | None], bool]
    ) -> int:
        end = self._end.offset

        def deletable(segment: LogSegment, nxt: LogSegment | None) -> bool:
            upper_bound = end if nxt is None else nxt.base_offset
            return high_watermark >= upper_bound and predicate(segment, nxt)

        return self._delete_leading_segments(deletable)

    @_storage_op("moving the start of")
    def increment_log_start_offset(self, offset: int) -> bool:
        """Move the log start forward (DeleteRecords, retention); whole segments below it
        are deleted. Returns False if `offset` is not past the current start."""
        with self._lock:
            if offset <= self._log_start_offset:
                return False
            if offset > self._end.offset:
                raise KafkaError(
                    ErrorCode.OFFSET_OUT_OF_RANGE,
                    f"cannot start {self.topic}-{self.partition} at {offset}, past its end {self._end.offset}",
                )
            self._log_start_offset = offset
            self._epochs.truncate_from_start(offset)
            self._delete_leading_segments(lambda s, nxt: nxt is not None and nxt.base_offset <= offset)
            return True

    def _delete_leading_segments(self, predicate: Callable[[LogSegment, LogSegment | None], bool]) -> int:
        segments = self._segments
        following = [*segments[1:], None]
        count = 0
        while count < len(segments) and predicate(segments[count], following[count]):
            count += 1
        if count == len(segments):
            if segments[-1].size == 0:
                count -= 1
            else:
                self._roll(self._end.offset, now_ms())
                self._end = LogOffsetMetadata(self._end.offset, self._segments[-1].base_offset, 0)
        if count == 0:
            return 0
        doomed, kept = self._segments[:count], self._segments[count:]
        new_start = max(self._log_start_offset, kept[0].base_offset)
        if new_start != self._log_start_offset:
            self._log_start_offset = new_start
            self._epochs.truncate_from_start(new_start)
        self._segments = kept
        self._delete_segment_files(doomed)
        return count

    def _delete_segment_files(self, doomed: list[LogSegment]) -> None:
        """Rename the files `.deleted` now and remove them file.delete.delay.ms later, so
        that a reader already inside one of these segments finishes (Kafka's asyncDelete)."""
        for segment in doomed:
            segment.change_file_suffixes("", DELETED_FILE_SUFFIX)
        delay = self._config.file_delete_delay_ms
        if self._scheduler is None or delay <= 0:
            for segment in doomed:
                segment.delete()
            return

        def delete_files() -> None:
            for segment in doomed:
                segment.delete()

        self._scheduler.schedule_once(f"delete-file {self.topic}-{self.partition}", delete_files, delay)

    # Compaction --------------------------------------------------------------------------

    @property
    def truncation_count(self) -> int:
        """Changes whenever offsets are cut: a cleaning that started before is void."""
        return self._truncations

    def last_records_of_producers(self) -> dict[int, LastRecord]:
        """Each known producer's last data offset and epoch: the batch a cleaning must keep
        (even emptied), since it carries the producer's last sequence or epoch (Kafka's rule)."""
        with self._lock:
            return {
                pid: LastRecord(entry.last_data_offset if entry.batches else None, entry.producer_epoch)
                for pid, entry in self._producers.producers.items()
            }

    @_storage_op("swapping cleaned segments into")
    def replace_segments(self, new: LogSegment, old: Sequence[LogSegment], truncation_count: int) -> bool:
        """Swap the flushed `.cleaned` segment `new` in for the consecutive rolled segments
        `old` (see `segment_swap`). Returns False, deleting `new`, when the log changed under
        the cleaning (a truncation, or `old` no longer all in the log)."""
        with self._lock:
            segments = self._segments
            first = next((i for i, s in enumerate(segments) if s is old[0]), None)
            if (
                truncation_count != self._truncations
                or first is None
                or segments[first : first + len(old)] != list(old)
                or first + len(old) >= len(segments)
            ):
                new.delete()
                return False
            swap_end = swap_in(self._dir, new, old, segments[first + len(old)].base_offset)
            self._segments = [*segments[:first], new, *segments[first + len(old) :]]
        for segment in old:
            segment.delete()
        swap_end.unlink()
        return True

    # Truncation --------------------------------------------------------------------------

    @_storage_op("truncation of")
    def truncate_to(self, offset: int) -> bool:
        """Drop every offset >= `offset` (a follower's divergent tail); returns whether
        anything was dropped. A batch holding `offset` goes whole; the LEO becomes `offset`."""
        if offset < 0:
            raise ValueError(f"cannot truncate to offset {offset}")
        with self._lock:
            if offset >= self._end.offset:
                self._epochs.truncate_from_end(self._end.offset)
                return False
            self._truncate_locked(offset)
            if self._producers.producers:
                self._load_producer_state()
            else:
                # No producer known (always so without idempotent producers): nothing to
                # rebuild, and no reason to replay the log.
                self._producers.delete_snapshots_after(offset)
            return True

    def _truncate_locked(self, offset: int) -> None:
        """Cut the files at `offset`, even past the published end (undoing an append)."""
        if offset < self._segments[0].base_offset:
            self._truncate_fully(offset)
            return
        kept = [s for s in self._segments if s.base_offset <= offset]
        doomed = self._segments[len(kept) :]
        self._segments = kept
        for segment in doomed:
            segment.delete()
        active = kept[-1]
        active.truncate_to(offset)
        self._end = LogOffsetMetadata(offset, active.base_offset, active.size)
        self._epochs.truncate_from_end(offset)
        self._log_start_offset = min(self._log_start_offset, offset)
        self._recovery_point = min(self._recovery_point, offset)
        self._truncations += 1

    @_storage_op("truncation of")
    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Delete everything; the log restarts empty at `offset` (start = end = offset)."""
        with self._lock:
            self._truncate_fully(offset)

    def _truncate_fully(self, offset: int) -> None:
        for segment in self._segments:
            segment.delete()
        segment = LogSegment.open(self._dir, offset, self._config)
        self._log_start_offset = offset
        self._segments = [segment]
        self._end = LogOffsetMetadata(offset, offset, 0)
        self._epochs.clear()
        self._producers.truncate_fully()
        self._first_unstable = None
        self._recovery_point = offset
        self._dir_dirty = True
        self._truncations += 1

    def _load_producer_state(self, replay_from: int | None = None) -> None:
        """The latest snapshot at or below the log end (and `replay_from`), then every
        batch header after it (from the first segment when there is no snapshot); records
        are decoded only for markers, whose aborted transactions are indexed again."""
        producers = self._producers
        offset = producers.truncate_and_reload(self._end.offset, replay_from)
        segments = self._segments
        end = self._end
        first = 0 if offset is None else max(0, bisect_right(segments, offset, key=attrgetter("base_offset")) - 1)
        for i in range(first, len(segments)):
            segment = segments[i]
            limit = end.position if segment.base_offset == end.segment_base_offset else segment.size
            position = 0
            if i == first and offset is not None:
                location = segment.translate_offset(offset, limit)
                if location is None:
                    continue
                position = location.position
            for at, header in _batch_headers(segment.log, position, limit):
                if header.producer_id < 0:
                    continue
                if header.is_control:
                    self._complete_txn(segment.log.read(at, header.size), header, header.base_offset)
                else:
                    producers.on_batch_in_log(header)
        self._first_unstable = producers.first_unstable_offset

    # Durability and lifecycle ------------------------------------------------------------

    @_storage_op("flush of")
    def flush(self, up_to: int | None = None) -> None:
        """fsync the not-yet-flushed segments holding offsets below `up_to` (default: the
        LEO) and move the recovery point there."""
        with self._lock:
            target = self._end.offset if up_to is None else min(up_to, self._end.offset)
            segments = self._segments
            recovery_point = self._recovery_point
            dirty = [
                s
                for i, s in enumerate(segments)
                if s.base_offset < target and (i + 1 == len(segments) or segments[i + 1].base_offset > recovery_point)
            ]
            dir_dirty, self._dir_dirty = self._dir_dirty, False
            truncations = self._truncations
        # fsync without the lock: appends continue meanwhile.
        started = time.monotonic()
        if target > recovery_point:
            for segment in dirty:
                segment.flush()
        if dir_dirty:
            fsync_dir(self._dir)
        if self.on_flush is not None and (target > recovery_point or dir_dirty):
            self.on_flush(time.monotonic() - started)
        with self._lock:
            if truncations == self._truncations and target > self._recovery_point:
                self._recovery_point = target
            self._last_flush_ms = now_ms()

    def _flush_in_background(self, up_to: int) -> None:
        try:
            self.flush(up_to)
        except KafkaError:
            pass  # a storage error, reported to the failure channel by flush
        except Exception:
            logger.exception("flushing %s up to offset %d failed", self._dir, up_to)

    def _sync_snapshot_in_background(self, path: Path) -> None:
        try:
            sync_snapshot(path)
        except OSError as exc:
            self.storage_error("fsync of the producer state snapshot of", exc)
        except Exception:
            logger.exception("fsync of producer state snapshot %s failed", path)

    def _await_background_flushes(self) -> None:
        for future in self._pending_flushes:
            future.result()

    @_storage_op("closing", check_online=False)
    def close(self) -> None:
        """Snapshot the producer state, then close every file (no flush of the segments:
        call flush() first for a clean shutdown)."""
        self._await_background_flushes()
        with self._lock:
            try:
                self._producers.remove_expired_producers(now_ms())
                self._producers.take_snapshot(self._end.offset, sync=True)
            except OSError:
                # Only costs a longer replay at the next open: the log is the truth.
                logger.exception("could not snapshot the producer state of %s", self._dir)
            for segment in self._segments:
                segment.close()

    def close_handlers(self) -> None:
        """Close every file without writing anything: its log dir went offline (a fetch
        still sending from it fails, as the disk would make it)."""
        with self._lock:
            for segment in self._segments:
                segment.close_handlers()

    @_storage_op("moving")
    def rename_dir(self, new_dir: Path) -> None:
        """Move the partition directory (e.g. to `<dir>.<uuid>-delete`); files stay open."""
        with self._lock:
            self._dir.rename(new_dir)
            fsync_dir(new_dir.parent)
            self._dir = new_dir
            self._log_dir = new_dir.parent
            for segment in self._segments:
                segment.change_dir(new_dir)
            self._epochs.path = new_dir / LEADER_EPOCH_CHECKPOINT
            self._producers.dir = new_dir

    @_storage_op("deleting", check_online=False)
    def delete(self) -> None:
        """Remove the log's files and directory. Slices already handed out stay readable."""
        self._await_background_flushes()
        with self._lock:
            for segment in self._segments:
                segment.delete()
            shutil.rmtree(self._dir, ignore_errors=True)


# Helpers ---------------------------------------------------------------------------------


def _now(now: int | None) -> int:
    return now_ms() if now is None else now


def _duplicate_append_info(
    original: BatchMetadata, header: RecordBatchHeader, log_append_time: bool, size: int
) -> LogAppendInfo:
    """The answer to a retried batch: the original batch's offsets and timestamp (with
    LogAppendTime its max timestamp is the time it was stamped with)."""
    return LogAppendInfo(
        original.first_offset,
        original.last_offset,
        original.max_timestamp,
        original.last_offset,
        original.max_timestamp if log_append_time else -1,
        1,
        header.record_count,
        size,
        duplicate=True,
    )


def _batch_headers(records: FileRecords, position: int, end: int) -> Iterator[tuple[int, RecordBatchHeader]]:
    """(position, header) of every batch from `position` (a batch start) to `end`, read a chunk
    at a time; the bytes were validated when appended or recovered."""
    chunk, chunk_start = b"", position
    while position + HEADER_SIZE <= end:
        if position + HEADER_SIZE > chunk_start + len(chunk):
            chunk_start = position
            chunk = records.read(position, min(SCAN_CHUNK, end - position))
            if len(chunk) < HEADER_SIZE:
                return
        header = RecordBatchHeader.parse(chunk, position - chunk_start)
        if header.size < HEADER_SIZE:
            raise KafkaError(
                ErrorCode.KAFKA_STORAGE_ERROR, f"{records.path}: batch at {position} claims {header.size} bytes"
            )
        yield position, header
        position += header.size


class _UndoneOnIoError:
    """Log._undone_on_io_error's context: a class, not a @contextmanager generator, which
    cost a few µs per append."""

    __slots__ = ("_log", "_start")

    def __init__(self, log: Log) -> None:
        self._log = log
        self._start = -1

    def __enter__(self) -> None:
        self._start = self._log._end.offset

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: object) -> None:
        if exc_type is not None and issubclass(exc_type, OSError):
            self._log._undo_append(self._start)  # and the error goes on


def _byte_view(records: Bytes) -> memoryview:
    view = memoryview(records)
    return view if view.format == "B" and view.ndim == 1 else view.cast("B")


def _validate(view: memoryview, config: LogConfig, for_leader: bool) -> list[tuple[int, RecordBatchHeader]]:
    """(position, header) of every batch, after checking them all: nothing is appended
    unless everything is valid. Followers skip the producer-facing limits, as in Kafka."""
    if not len(view):
        raise KafkaError(ErrorCode.CORRUPT_MESSAGE, "no record batches to append")
    batches = []
    position = 0
    while position < len(view):
        if peek_batch_size(view, position) is None:
            raise KafkaError(ErrorCode.CORRUPT_MESSAGE, f"{len(view) - position} trailing bytes are not a record batch")
        header = validate_batch(view, position)
        batches.append((position, header))
        position += header.size
    if for_leader:
        _check_leader_limits(batches, len(view), config)
    return batches


def _check_leader_limits(batches: list[tuple[int, RecordBatchHeader]], size: int, config: LogConfig) -> None:
    """The producer-facing limits of a leader's append, on batches already parsed and checked."""
    for _, header in batches:
        if header.size > config.max_message_bytes:
            raise KafkaError(
                ErrorCode.MESSAGE_TOO_LARGE,
                f"record batch of {header.size} bytes exceeds max.message.bytes={config.max_message_bytes}",
            )
        if header.record_count != header.last_offset_delta + 1:
            raise KafkaError(
                ErrorCode.INVALID_RECORD,
                f"record batch has {header.record_count} records but last offset delta {header.last_offset_delta}",
            )
    if size > config.segment_bytes:
        raise KafkaError(
            ErrorCode.RECORD_LIST_TOO_LARGE,
            f"{size} bytes in one append exceed segment.bytes={config.segment_bytes}",
        )


def _stamp_header(view: memoryview, position: int, size: int, offset: int, epoch: int) -> tuple[Bytes, Bytes]:
    """The batch's first 16 bytes with its offset and leader epoch set (neither is under
    the CRC; batchLength between them as it is), and the untouched rest of the batch:
    written together, never joined."""
    return _OFFSET_LENGTH_EPOCH.pack(offset, size - LOG_OVERHEAD, epoch), view[position + MAGIC_POS : position + size]


def _stamp_whole_batch(view: memoryview, position: int, size: int, offset: int, epoch: int, now: int) -> bytearray:
    """A copy of the batch marked LogAppendTime with base and max timestamp `now`; the
    attributes and timestamps are under the CRC, so it is recomputed."""
    batch = bytearray(view[position : position + size])
    set_base_offset(batch, 0, offset)
    set_partition_leader_epoch(batch, 0, epoch)
    attributes = _ATTRIBUTES.unpack_from(batch, ATTRIBUTES_POS)[0]
    _ATTRIBUTES.pack_into(batch, ATTRIBUTES_POS, attributes | TIMESTAMP_TYPE_MASK)
    _TIMESTAMPS.pack_into(batch, _BASE_TIMESTAMP_POS, now, now)
    set_crc(batch, 0, size)
    return batch


def _segment_base_offsets(dir: Path) -> list[int]:
    """Base offsets of the .log files; index files without a .log are removed."""
    logs, orphans = set(), []
    for path in dir.iterdir():
        match = _SEGMENT_FILE.match(path.name)
        if match and match.group(2) == "log":
            logs.add(int(match.group(1)))
        elif match:
            orphans.append((int(match.group(1)), path))
    for base, path in orphans:
        if base not in logs:
            logger.warning("removing %s: it has no .log", path)
            path.unlink()
    return sorted(logs)


def _load_segments(
    dir: Path, config: LogConfig, epochs: LeaderEpochFileCache, recovery_point: int | None
) -> list[LogSegment]:
    """Open every segment in `dir`. With a `recovery_point` (the shutdown was not clean)
    the segments from the one holding it on are recovered, and after one whose tail had
    to be cut the later ones cannot be trusted and are deleted."""
    bases = _segment_base_offsets(dir)
    first_unflushed = len(bases) if recovery_point is None else max(0, bisect_right(bases, recovery_point) - 1)
    segments = []
    for i, base in enumerate(bases):
        segment = LogSegment(dir, base, config)
        segments.append(segment)
        if i < first_unflushed:
            segment.load(epochs)
        elif segment.recover(epochs) and i + 1 < len(bases):
            logger.warning("deleting the %d segments after corruption in %s", len(bases) - i - 1, segment.log.path)
            for later in bases[i + 1 :]:
                LogSegment(dir, later, config).delete()
            break
    return segments
