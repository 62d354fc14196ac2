"""The fixed 61-byte header of a Kafka magic-2 record batch.

This is all the broker's hot path ever parses: offsets are assigned by rewriting
`base_offset` in place (it is not covered by the CRC) and the leader epoch is stamped the
same way, so a batch is validated and appended without touching its records.

Layout (big-endian), offsets in bytes:
    0 baseOffset int64 | 8 batchLength int32 | 12 partitionLeaderEpoch int32 | 16 magic int8
    17 crc uint32 (CRC-32C of bytes 21..end) | 21 attributes int16 | 23 lastOffsetDelta int32
    27 baseTimestamp int64 | 35 maxTimestamp int64 | 43 producerId int64
    51 producerEpoch int16 | 53 baseSequence int32 | 57 recordCount int32 | 61 records...
"""

from __future__ import annotations

import struct
from typing import NamedTuple

import crc32c

from loglake.errors import ErrorCode, KafkaError

HEADER_SIZE = 61
# baseOffset + batchLength: batchLength counts the bytes after these 12.
LOG_OVERHEAD = 12
MAGIC = 2

BASE_OFFSET_POS = 0
LENGTH_POS = 8
PARTITION_LEADER_EPOCH_POS = 12
MAGIC_POS = 16
CRC_POS = 17
ATTRIBUTES_POS = 21

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_PARTITION_LEADER_EPOCH = -1

COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_MASK = 0x10
CONTROL_MASK = 0x20
DELETE_HORIZON_MASK = 0x40

_HEADER = struct.Struct(">qiibIhiqqqhii")
_OFFSET_LENGTH = struct.Struct(">qi")
_INT64 = struct.Struct(">q")
_INT32 = struct.Struct(">i")
_UINT32 = struct.Struct(">I")


# A NamedTuple, not a frozen dataclass: the broker parses a header per produced batch (twice:
# the client check, then the log's), and a frozen dataclass's __init__ sets its 13 fields
# one object.__setattr__ at a time, several times the cost of the unpack itself.
class RecordBatchHeader(NamedTuple):
    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int

    @classmethod
    def parse(cls, buf: bytes | bytearray | memoryview, pos: int = 0) -> RecordBatchHeader:
        """Parse the header at `pos`; raises CORRUPT_MESSAGE if it is cut short or not magic 2."""
        if len(buf) - pos < HEADER_SIZE:
            raise KafkaError(ErrorCode.CORRUPT_MESSAGE, "record batch shorter than its 61-byte header")
        header = cls._make(_HEADER.unpack_from(buf, pos))
        if header.magic != MAGIC:
            raise KafkaError(
                ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT if 0 <= header.magic < MAGIC else ErrorCode.CORRUPT_MESSAGE,
                f"record batch magic {header.magic}; only magic 2 is supported",
            )
        return header

    @property
    def size(self) -> int:
        """Bytes the whole batch occupies in a log, header included."""
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def compression(self) -> int:
        return self.attributes & COMPRESSION_MASK

    @property
    def is_log_append_time(self) -> bool:
        return bool(self.attributes & TIMESTAMP_TYPE_MASK)

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_MASK)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_MASK)

    @property
    def has_producer_id(self) -> bool:
        return self.producer_id >= 0

    @property
    def last_sequence(self) -> int:
        if self.base_sequence == NO_SEQUENCE:
            return NO_SEQUENCE
        return (self.base_sequence + self.last_offset_delta) & 0x7FFFFFFF


def compute_crc(buf: bytes | bytearray | memoryview, pos: int, size: int) -> int:
    """CRC-32C over attributes..end of the batch that starts at `pos` and spans `size` bytes."""
    view = memoryview(buf)[pos + ATTRIBUTES_POS : pos + size]
    return crc32c.crc32c(view)


def peek_batch_size(buf: bytes | bytearray | memoryview, pos: int = 0) -> int | None:
    """Total size of the batch starting at `pos`, or None if fewer than 12 bytes remain."""
    if len(buf) - pos < LOG_OVERHEAD:
        return None
    return _OFFSET_LENGTH.unpack_from(buf, pos)[1] + LOG_OVERHEAD


def first_batch_transactional(buf: bytes | bytearray | memoryview | None) -> bool:
    """Whether the records a client sent start with a transactional batch (what Kafka's
    RequestUtils.hasTransactionalRecords looks at); False for too short or no records."""
    if buf is None or len(buf) < HEADER_SIZE:
        return False
    return bool(buf[ATTRIBUTES_POS + 1] & TRANSACTIONAL_MASK)


def validate_batch(buf: bytes | bytearray | memoryview, pos: int = 0) -> RecordBatchHeader:
    """Parse and check one complete batch at `pos`: length, magic, CRC-32C.

    Raises KafkaError(CORRUPT_MESSAGE) with a message that says what is wrong.
    """
    header = RecordBatchHeader.parse(buf, pos)
    if header.batch_length < HEADER_SIZE - LOG_OVERHEAD:
        raise KafkaError(ErrorCode.CORRUPT_MESSAGE, f"record batch length {header.batch_length} is too small")
    size = header.size
    if size > len(buf) - pos:
        raise KafkaError(
            ErrorCode.CORRUPT_MESSAGE,
            f"record batch length {header.batch_length} runs past the {len(buf) - pos} bytes given",
        )
    if header.last_offset_delta < 0 or header.record_count < 0:
        raise KafkaError(ErrorCode.CORRUPT_MESSAGE, "record batch has a negative record count or offset delta")
    actual = compute_crc(buf, pos, size)
    if actual != header.crc:
        raise KafkaError(
            ErrorCode.CORRUPT_MESSAGE,
            f"record batch CRC mismatch: header says {header.crc:#010x}, contents give {actual:#010x}",
        )
    return header


def set_base_offset(buf: bytearray | memoryview, pos: int, base_offset: int) -> None:
    """Rewrite the base offset in place; the CRC does not cover it."""
    _INT64.pack_into(buf, pos + BASE_OFFSET_POS, base_offset)


def set_partition_leader_epoch(buf: bytearray | memoryview, pos: int, epoch: int) -> None:
    """Stamp the partition leader epoch in place; the CRC does not cover it."""
    _INT32.pack_into(buf, pos + PARTITION_LEADER_EPOCH_POS, epoch)


def set_crc(buf: bytearray | memoryview, pos: int, size: int) -> None:
    """Recompute and store the CRC after bytes from attributes onwards were changed."""
    _UINT32.pack_into(buf, pos + CRC_POS, compute_crc(buf, pos, size))
