"""Idempotent producers' state for one partition log (the role of Kafka's ProducerStateManager).

For every producer id the log holds batches of: its epoch and the metadata of its last
five batches, enough to answer a retried batch with the offsets it got the first time and
to refuse sequences that go back or skip. The state always covers the log exactly up to
its end offset: the Log updates it under its lock after each successful append, rebuilds
it after truncation, and reloads it on open from the latest snapshot plus the batch
headers after it.

Transactions: a producer's first transactional batch after a marker opens its
transaction (`current_txn_first_offset`); the COMMIT/ABORT marker a coordinator writes
(`complete_txn`) closes it. The first offset of the oldest open transaction is the log's
first unstable offset: a read_committed consumer reads no further (the LSO).

A snapshot `<offset, 20 digits>.snapshot` holds the state as of `offset` (Kafka's name;
loglake's own format), big-endian:

    version int16 (2) | crc uint32 (CRC-32C of everything after it) | producer count int32
    per producer: producerId int64 | producerEpoch int16 | currentTxnFirstOffset int64 (-1: none) |
                  lastTimestamp int64 | batch count int8
      per batch (oldest first): firstSeq int32 | lastSeq int32 | firstOffset int64 |
                                lastOffset int64 | maxTimestamp int64

Version 1 (no currentTxnFirstOffset or lastTimestamp, at least one batch) still loads.
Control batches are refused from producers (only a coordinator writes them, through
`complete_txn`) and carry no sequence.
"""

from __future__ import annotations

import logging
import os
import re
import struct
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import crc32c

from loglake.errors import ErrorCode, KafkaError
from loglake.record.header import RecordBatchHeader
from loglake.storage.fileutil import fsync_dir

logger = logging.getLogger(__name__)

# Kafka's ProducerStateEntry.NUM_BATCHES_TO_RETAIN: the producer's default
# max.in.flight.requests.per.connection, the most batches a retry can go back.
NUM_BATCHES_TO_RETAIN = 5
# Kafka's producer.id.expiration.ms default (a broker setting, absent from LogConfig).
PRODUCER_ID_EXPIRATION_MS = 86_400_000
SNAPSHOT_SUFFIX = ".snapshot"
SNAPSHOTS_TO_KEEP = 2
SNAPSHOT_VERSION = 2
NO_SEQUENCE = -1

_SEQUENCE_MASK = 0x7FFFFFFF  # sequences wrap from Int32.MAX to 0
_SNAPSHOT_FILE = re.compile(r"^(\d{20})\.snapshot$")
_VERSION_CRC = struct.Struct(">hI")  # the CRC covers every byte after these
_COUNT = struct.Struct(">i")
_PRODUCER_V1 = struct.Struct(">qhb")
_PRODUCER = struct.Struct(">qhqqb")
_BATCH = struct.Struct(">iiqqq")


class CorruptSnapshotError(ValueError):
    """A snapshot file that is cut short, of another version or fails its CRC."""


@dataclass(frozen=True, slots=True)
class CompletedTxn:
    """A transaction a marker ended: its producer, first data offset, the marker's
    offset, whether it aborted, and the LSO right after it (what `.txnindex` records)."""

    producer_id: int
    first_offset: int
    last_offset: int
    is_aborted: bool
    last_stable_offset: int


@dataclass(slots=True)
class BatchMetadata:
    """One appended batch of a producer: what a retry of it is answered with. Never
    changed once made; not frozen because one is built per appended batch and a frozen
    dataclass takes four times as long to construct."""

    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    max_timestamp: int


@dataclass(frozen=True, slots=True)
class LastRecord:
    """A producer's last entry in the log, which a cleaning keeps (Kafka's LastRecord): the
    last offset of its last data batch (None when its epoch has no data yet, as after a
    marker of a bumped epoch: then that epoch's marker is what fences older epochs)."""

    last_data_offset: int | None
    producer_epoch: int


@dataclass(slots=True)
class ProducerStateEntry:
    producer_id: int
    producer_epoch: int
    # Oldest first, at most NUM_BATCHES_TO_RETAIN (the deque's maxlen); empty after a
    # marker of a newer epoch (the epoch's first batch then must have sequence 0).
    batches: deque[BatchMetadata]
    # What expiry counts from: the max timestamp of the producer's last batch or marker (Kafka's rule).
    last_timestamp: int
    current_txn_first_offset: int = -1

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else NO_SEQUENCE

    @property
    def last_data_offset(self) -> int:
        return self.batches[-1].last_offset if self.batches else -1

    def find_duplicate(self, first_seq: int, last_seq: int) -> BatchMetadata | None:
        for batch in self.batches:
            if batch.first_seq == first_seq and batch.last_seq == last_seq:
                return batch
        return None


def snapshot_path(dir: Path, offset: int) -> Path:
    return dir / f"{offset:020d}{SNAPSHOT_SUFFIX}"


def sync_snapshot(path: Path) -> None:
    """fsync a snapshot written with sync=False (and its directory entry); a snapshot
    already superseded and deleted is fine."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    fsync_dir(path.parent)


class ProducerStateManager:
    def __init__(self, dir: Path, producer_id_expiration_ms: int = PRODUCER_ID_EXPIRATION_MS) -> None:
        self.dir = dir
        self.producer_id_expiration_ms = producer_id_expiration_ms
        self.producers: dict[int, ProducerStateEntry] = {}
        # First offset of each open transaction -> its producer id.
        self.ongoing_txns: dict[int, int] = {}

    def __repr__(self) -> str:
        return f"ProducerStateManager({self.dir.name}, {len(self.producers)} producers)"

    # Appends -----------------------------------------------------------------------------

    def validate_append(
        self, headers: Sequence[RecordBatchHeader], from_coordinator: bool = False
    ) -> BatchMetadata | None:
        """Check a leader append's batches in order, each against the state the batches
        before it would leave; batches without a producer id are skipped.

        Returns the cached batch when the append is a retry of one of the producer's last
        five batches: nothing must then be written, and the producer gets the original
        offsets. A retry must be the only batch of its append (the Java producer sends one
        batch per partition; a request mixing a retry with new batches cannot be answered
        with one set of offsets), else INVALID_RECORD.
        Raises KafkaError: INVALID_PRODUCER_EPOCH (an epoch older than the producer's),
        OUT_OF_ORDER_SEQUENCE_NUMBER (a new epoch not starting at sequence 0, or a
        sequence that does not follow the last one), INVALID_RECORD (a control batch not
        `from_coordinator`, or a producer id with no sequence). Batches `from_coordinator`
        are checked by epoch only.
        """
        # Producer id -> (epoch, last sequence) after the earlier batches of this append.
        pending: dict[int, tuple[int, int]] = {}
        for header in headers:
            producer_id = header.producer_id
            if producer_id < 0:
                continue
            if header.is_control and from_coordinator:
                self.check_marker(producer_id, header.producer_epoch)
                continue
            if header.is_control:
                raise KafkaError(
                    ErrorCode.INVALID_RECORD,
                    f"producer {producer_id} sent a control batch to {self.dir.name}; "
                    "only a transaction coordinator writes those",
                )
            if from_coordinator:
                # A group coordinator's TxnOffsetCommit batch: fenced by epoch only, as
                # Kafka checks coordinator appends (their sequences are not the producer's).
                self.check_marker(producer_id, header.producer_epoch)
                continue
            epoch, first_seq, last_seq = header.producer_epoch, header.base_sequence, header.last_sequence
            if first_seq < 0:
                raise KafkaError(
                    ErrorCode.INVALID_RECORD, f"batch of producer {producer_id} has invalid base sequence {first_seq}"
                )
            entry = None
            if producer_id in pending:
                current_epoch, current_last_seq = pending[producer_id]
            else:
                entry = self.producers.get(producer_id)
                if entry is None:
                    # New, or its state went with retention or expiry: any sequence is accepted.
                    pending[producer_id] = (epoch, last_seq)
                    continue
                current_epoch, current_last_seq = entry.producer_epoch, entry.last_seq
            if epoch == current_epoch:
                if first_seq != (current_last_seq + 1) & _SEQUENCE_MASK:
                    duplicate = None if entry is None else entry.find_duplicate(first_seq, last_seq)
                    if duplicate is not None:
                        if len(headers) == 1:
                            return duplicate
                        raise KafkaError(
                            ErrorCode.INVALID_RECORD,
                            f"retried batch of producer {producer_id} (sequences {first_seq}..{last_seq}) "
                            f"must be the only batch of its append to {self.dir.name}",
                        )
                    raise KafkaError(
                        ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                        f"out of order sequence for producer {producer_id} in {self.dir.name}: "
                        f"{first_seq} (incoming), {current_last_seq} (last appended)",
                    )
            elif epoch > current_epoch:
                if first_seq != 0:
                    raise KafkaError(
                        ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                        f"producer {producer_id} starts epoch {epoch} in {self.dir.name} "
                        f"at sequence {first_seq}, not 0",
                    )
            else:
                raise KafkaError(
                    ErrorCode.INVALID_PRODUCER_EPOCH,
                    f"producer {producer_id} has epoch {epoch} in {self.dir.name}, "
                    f"older than its current epoch {current_epoch}",
                )
            pending[producer_id] = (epoch, last_seq)
        return None

    def on_leader_append(
        self, headers: Sequence[RecordBatchHeader], first_offset: int, log_append_time: int | None
    ) -> None:
        """Record the batches of an append that `validate_append` passed and that is now
        written from `first_offset` on (stamped `log_append_time` if the topic uses it)."""
        offset = first_offset
        for header in headers:
            last_offset = offset + header.last_offset_delta
            if header.producer_id >= 0 and not header.is_control:  # the log completes markers
                timestamp = header.max_timestamp if log_append_time is None else log_append_time
                self._append_batch(
                    header.producer_id,
                    header.producer_epoch,
                    BatchMetadata(header.base_sequence, header.last_sequence, offset, last_offset, timestamp),
                    header.is_transactional,
                )
            offset = last_offset + 1

    def on_batch_in_log(self, header: RecordBatchHeader) -> None:
        """Record a batch as it is in the log (a follower's append, or read back when the
        state is rebuilt), unchecked: the leader validated it."""
        if header.producer_id >= 0 and not header.is_control:
            self._append_batch(
                header.producer_id,
                header.producer_epoch,
                BatchMetadata(
                    header.base_sequence,
                    header.last_sequence,
                    header.base_offset,
                    header.last_offset,
                    header.max_timestamp,
                ),
                header.is_transactional,
            )

    def _append_batch(self, producer_id: int, producer_epoch: int, batch: BatchMetadata, transactional: bool) -> None:
        entry = self.producers.get(producer_id)
        if entry is None or entry.producer_epoch != producer_epoch:
            # A new epoch forgets the old one's batches. Replicated data is followed even
            # when its epoch goes back, as Kafka does: the log is the truth.
            txn_first = -1 if entry is None else entry.current_txn_first_offset
            entry = self.producers[producer_id] = ProducerStateEntry(
                producer_id, producer_epoch, deque((batch,), NUM_BATCHES_TO_RETAIN), batch.max_timestamp, txn_first
            )
        else:
            entry.batches.append(batch)
            entry.last_timestamp = batch.max_timestamp
        if transactional and entry.current_txn_first_offset < 0:
            entry.current_txn_first_offset = batch.first_offset
            self.ongoing_txns[batch.first_offset] = producer_id

    # Transactions ------------------------------------------------------------------------

    def check_marker(self, producer_id: int, producer_epoch: int) -> None:
        """A coordinator's batch (a marker, a transactional offset commit) must not carry an
        epoch older than the producer's (INVALID_PRODUCER_EPOCH: the producer was fenced,
        or the coordinator lost the transaction)."""
        entry = self.producers.get(producer_id)
        if entry is not None and producer_epoch < entry.producer_epoch:
            raise KafkaError(
                ErrorCode.INVALID_PRODUCER_EPOCH,
                f"coordinator batch of producer {producer_id} has epoch {producer_epoch} in {self.dir.name}, "
                f"older than its current epoch {entry.producer_epoch}",
            )

    def complete_txn(
        self, producer_id: int, producer_epoch: int, commit: bool, marker_offset: int, timestamp: int
    ) -> CompletedTxn | None:
        """A marker at `marker_offset` ends the producer's open transaction; returns it, or
        None if the producer had none here (a marker for a partition it wrote nothing to)."""
        entry = self.producers.get(producer_id)
        if entry is None:
            entry = self.producers[producer_id] = ProducerStateEntry(
                producer_id, producer_epoch, deque(maxlen=NUM_BATCHES_TO_RETAIN), timestamp
            )
        elif producer_epoch > entry.producer_epoch:
            # A marker of a newer epoch (the coordinator bumped it to abort): the epoch's
            # data then starts at sequence 0, as after any epoch change.
            entry.producer_epoch = producer_epoch
            entry.batches = deque(maxlen=NUM_BATCHES_TO_RETAIN)
        entry.last_timestamp = max(entry.last_timestamp, timestamp)
        first_offset = entry.current_txn_first_offset
        if first_offset < 0:
            return None
        entry.current_txn_first_offset = -1
        del self.ongoing_txns[first_offset]
        first_unstable = self.first_unstable_offset
        return CompletedTxn(
            producer_id,
            first_offset,
            marker_offset,
            not commit,
            marker_offset + 1 if first_unstable is None else first_unstable,
        )

    @property
    def first_unstable_offset(self) -> int | None:
        """The first offset of the oldest open transaction; None when none is open."""
        return min(self.ongoing_txns) if self.ongoing_txns else None

    def remove_expired_producers(self, now: int) -> None:
        """Forget producers whose last batch is producer.id.expiration.ms old or more."""
        limit = now - self.producer_id_expiration_ms
        # A producer with an open transaction stays: its marker still has to come.
        expired = [
            pid
            for pid, entry in self.producers.items()
            if entry.last_timestamp <= limit and entry.current_txn_first_offset < 0
        ]
        for producer_id in expired:
            del self.producers[producer_id]

    # Snapshots ---------------------------------------------------------------------------

    def snapshot_offsets(self) -> list[int]:
        """Offsets of the snapshot files in the directory, ascending."""
        offsets = []
        for path in self.dir.iterdir():
            match = _SNAPSHOT_FILE.match(path.name)
            if match:
                offsets.append(int(match.group(1)))
        return sorted(offsets)

    def take_snapshot(self, offset: int, sync: bool) -> Path:
        """Write the state as of `offset` (the log end) and keep only the latest
        SNAPSHOTS_TO_KEEP snapshots. Without `sync` the caller fsyncs later with
        `sync_snapshot` (a torn snapshot fails its CRC and is ignored on load)."""
        path = snapshot_path(self.dir, offset)
        tmp = path.with_name(path.name + ".tmp")
        with open(tmp, "wb") as f:
            f.write(_encode_snapshot(self.producers))
            if sync:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
        if sync:
            fsync_dir(self.dir)
        for old in self.snapshot_offsets()[:-SNAPSHOTS_TO_KEEP]:
            snapshot_path(self.dir, old).unlink(missing_ok=True)
        return path

    def truncate_and_reload(self, log_end_offset: int, at_most: int | None = None) -> int | None:
        """Delete the snapshots past `log_end_offset` and load the latest valid one left
        (corrupt ones are deleted too), not past `at_most` if given; returns its offset,
        None (and an empty state) if there is none. The caller replays the log's batches
        from that offset."""
        for stray in self.dir.glob(f"*{SNAPSHOT_SUFFIX}.tmp"):
            stray.unlink(missing_ok=True)
        self.delete_snapshots_after(log_end_offset)
        self.producers = {}
        self.ongoing_txns = {}
        for offset in reversed(self.snapshot_offsets()):
            if at_most is not None and offset > at_most:
                continue
            path = snapshot_path(self.dir, offset)
            try:
                self.producers = _decode_snapshot(path.read_bytes())
                self.ongoing_txns = {
                    e.current_txn_first_offset: e.producer_id
                    for e in self.producers.values()
                    if e.current_txn_first_offset >= 0
                }
                return offset
            except CorruptSnapshotError as exc:
                logger.warning("deleting snapshot %s: %s", path, exc)
                path.unlink(missing_ok=True)
        return None

    def delete_snapshots_after(self, offset: int) -> None:
        """The log was cut at `offset`: snapshots of the tail that is gone are deleted."""
        doomed = [o for o in self.snapshot_offsets() if o > offset]
        for doomed_offset in doomed:
            snapshot_path(self.dir, doomed_offset).unlink(missing_ok=True)
        if doomed:
            # A snapshot of a cut tail must not come back after a crash.
            fsync_dir(self.dir)

    def truncate_fully(self) -> None:
        """The log was emptied: no producers, no snapshots."""
        self.producers = {}
        self.ongoing_txns = {}
        for offset in self.snapshot_offsets():
            snapshot_path(self.dir, offset).unlink(missing_ok=True)


def _encode_snapshot(producers: dict[int, ProducerStateEntry]) -> bytes:
    body = [_COUNT.pack(len(producers))]
    for entry in producers.values():
        body.append(
            _PRODUCER.pack(
                entry.producer_id,
                entry.producer_epoch,
                entry.current_txn_first_offset,
                entry.last_timestamp,
                len(entry.batches),
            )
        )
        for b in entry.batches:
            body.append(_BATCH.pack(b.first_seq, b.last_seq, b.first_offset, b.last_offset, b.max_timestamp))
    data = b"".join(body)
    return _VERSION_CRC.pack(SNAPSHOT_VERSION, crc32c.crc32c(data)) + data


def _decode_snapshot(data: bytes) -> dict[int, ProducerStateEntry]:
    if len(data) < _VERSION_CRC.size + _COUNT.size:
        raise CorruptSnapshotError(f"{len(data)} bytes is shorter than the header")
    version, crc = _VERSION_CRC.unpack_from(data)
    if version not in (1, SNAPSHOT_VERSION):
        raise CorruptSnapshotError(f"unsupported version {version}")
    if crc32c.crc32c(memoryview(data)[_VERSION_CRC.size :]) != crc:
        raise CorruptSnapshotError("CRC mismatch")
    (count,) = _COUNT.unpack_from(data, _VERSION_CRC.size)
    producers = {}
    position = _VERSION_CRC.size + _COUNT.size
    try:
        for _ in range(count):
            if version == 1:
                producer_id, producer_epoch, batch_count = _PRODUCER_V1.unpack_from(data, position)
                txn_first_offset, last_timestamp = -1, None
                position += _PRODUCER_V1.size
            else:
                producer_id, producer_epoch, txn_first_offset, last_timestamp, batch_count = _PRODUCER.unpack_from(
                    data, position
                )
                position += _PRODUCER.size
            batches: deque[BatchMetadata] = deque(maxlen=NUM_BATCHES_TO_RETAIN)
            for _ in range(batch_count):
                batches.append(BatchMetadata(*_BATCH.unpack_from(data, position)))
                position += _BATCH.size
            if last_timestamp is None:
                if not batches:
                    raise CorruptSnapshotError(f"producer {producer_id} has no batches")
                last_timestamp = batches[-1].max_timestamp
            producers[producer_id] = ProducerStateEntry(
                producer_id, producer_epoch, batches, last_timestamp, txn_first_offset
            )
    except struct.error as exc:
        raise CorruptSnapshotError(f"cut short: {exc}") from None
    if position != len(data):
        raise CorruptSnapshotError(f"{len(data) - position} bytes after the last producer")
    return producers
