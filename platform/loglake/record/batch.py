"""Building and reading whole magic-2 record batches, records included.

The broker's append path never comes here (it works on headers, see `header.py`). This is
for the places that must see records: HTTP JSON produce and fetch, the group coordinator's
offsets topic, compaction, the Spark reader and tests.

A record inside a batch:
    length varint | attributes int8 | timestampDelta varlong | offsetDelta varint
    keyLength varint | key | valueLength varint | value | headerCount varint
    [headerKeyLength varint | headerKey utf-8 | headerValueLength varint | headerValue]
with -1 lengths for a null key, value or header value.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import TypedDict

import crc32c

from loglake.errors import ErrorCode, KafkaError
from loglake.record.compression import CompressionType, compress, decompress
from loglake.record.header import (
    ATTRIBUTES_POS,
    CONTROL_MASK,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC,
    NO_PARTITION_LEADER_EPOCH,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_MASK,
    RecordBatchHeader,
    peek_batch_size,
    validate_batch,
)
from loglake.record.varint import SMALL_VARINTS as _SMALL_VARINTS
from loglake.record.varint import decode_varint, encode_varint
from loglake.record.walk import holds_records

Header = tuple[str, bytes | None]
# What a producer supplies per record: key, value, headers, timestamp (None: now).
RecordRow = tuple[bytes | None, bytes | None, Sequence[Header], int | None]

_HEADER_AFTER_CRC = struct.Struct(">hiqqqhii")
_PREFIX = struct.Struct(">qiib")
_UINT32 = struct.Struct(">I")
_NULL = encode_varint(-1)
_ZERO = encode_varint(0)


@dataclass(slots=True)
class Record:
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: list[Header] = field(default_factory=list)


def _encode_headers(headers: Sequence[Header]) -> bytes:
    parts = [encode_varint(len(headers))]
    for name, hvalue in headers:
        raw_name = name.encode()
        parts.append(encode_varint(len(raw_name)))
        parts.append(raw_name)
        if hvalue is None:
            parts.append(_NULL)
        else:
            parts.append(encode_varint(len(hvalue)))
            parts.append(hvalue)
    return b"".join(parts)


def _encode_records(rows: Sequence[RecordRow], timestamps: list[int], base_timestamp: int) -> bytes:
    # One flat loop with table lookups for the small varints: this runs once per record of
    # every HTTP produce, so each avoided call counts.
    parts: list[bytes] = []
    extend = parts.extend
    small = _SMALL_VARINTS
    limit = len(small)
    for i, (key, value, headers, _) in enumerate(rows):
        if key is None:
            key_head, key_len, key = _NULL, 0, b""
        else:
            key_len = len(key)
            key_head = small[key_len] if key_len < limit else encode_varint(key_len)
        if value is None:
            value_head, value_len, value = _NULL, 0, b""
        else:
            value_len = len(value)
            value_head = small[value_len] if value_len < limit else encode_varint(value_len)
        delta = timestamps[i] - base_timestamp
        ts_head = small[delta] if 0 <= delta < limit else encode_varint(delta)
        offset_head = small[i] if i < limit else encode_varint(i)
        header_part = _encode_headers(headers) if headers else _ZERO
        size = (
            1
            + len(ts_head)
            + len(offset_head)
            + len(key_head)
            + key_len
            + len(value_head)
            + value_len
            + len(header_part)
        )
        extend(
            (
                small[size] if size < limit else encode_varint(size),
                b"\x00",  # attributes: unused in magic 2
                ts_head,
                offset_head,
                key_head,
                key,
                value_head,
                value,
                header_part,
            )
        )
    return b"".join(parts)


def encode_batch(
    rows: Sequence[RecordRow],
    now_ms: int,
    *,
    base_offset: int = 0,
    compression: CompressionType = CompressionType.NONE,
    log_append_time: bool = False,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
    transactional: bool = False,
    control: bool = False,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
) -> bytes:
    """One batch holding `rows` at consecutive offsets from `base_offset`."""
    if not rows:
        raise ValueError("a record batch holds at least one record")
    if log_append_time:
        timestamps = [now_ms] * len(rows)
    else:
        timestamps = [now_ms if row[3] is None else row[3] for row in rows]
    base_timestamp = timestamps[0]
    records = _encode_records(rows, timestamps, base_timestamp)
    if compression != CompressionType.NONE:
        records = compress(compression, records)
    attributes = int(compression)
    if log_append_time:
        attributes |= TIMESTAMP_TYPE_MASK
    if transactional:
        attributes |= TRANSACTIONAL_MASK
    if control:
        attributes |= CONTROL_MASK
    return frame_batch(
        records,
        len(rows),
        base_timestamp,
        max(timestamps),
        attributes=attributes,
        base_offset=base_offset,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        partition_leader_epoch=partition_leader_epoch,
    )


def frame_batch(
    records: bytes | bytearray | memoryview,
    count: int,
    base_timestamp: int,
    max_timestamp: int,
    *,
    attributes: int = 0,
    base_offset: int = 0,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
) -> bytes:
    """A batch around an encoded records section of `count` records (offset deltas 0..count-1,
    timestamps relative to `base_timestamp`): the header, its CRC32C and the records."""
    after_crc = (
        _HEADER_AFTER_CRC.pack(
            attributes,
            count - 1,
            base_timestamp,
            max_timestamp,
            producer_id,
            producer_epoch,
            base_sequence,
            count,
        )
        + records
    )
    crc = crc32c.crc32c(after_crc)
    # batchLength counts everything after itself: the rest of the header plus the records.
    prefix = _PREFIX.pack(base_offset, ATTRIBUTES_POS - LOG_OVERHEAD + len(after_crc), partition_leader_epoch, MAGIC)
    return prefix + _UINT32.pack(crc) + after_crc


def _decode_records(header: RecordBatchHeader, data: bytes | memoryview) -> list[Record]:
    records: list[Record] = []
    pos = 0
    end = len(data)
    base_offset = header.base_offset
    base_timestamp = header.base_timestamp
    append_time = header.max_timestamp if header.is_log_append_time else None
    for _ in range(header.record_count):
        length, pos = decode_varint(data, pos)
        record_end = pos + length
        if length < 0 or record_end > end:
            raise KafkaError(ErrorCode.CORRUPT_MESSAGE, "a record's length runs past its batch")
        pos += 1  # attributes: unused in magic 2
        timestamp_delta, pos = decode_varint(data, pos)
        offset_delta, pos = decode_varint(data, pos)
        key_length, pos = decode_varint(data, pos)
        key = None
        if key_length >= 0:
            key = bytes(data[pos : pos + key_length])
            pos += key_length
        value_length, pos = decode_varint(data, pos)
        value = None
        if value_length >= 0:
            value = bytes(data[pos : pos + value_length])
            pos += value_length
        header_count, pos = decode_varint(data, pos)
        headers: list[Header] = []
        for _ in range(header_count):
            name_length, pos = decode_varint(data, pos)
            if name_length < 0:
                raise KafkaError(ErrorCode.CORRUPT_MESSAGE, "a record header has a null key")
            name = bytes(data[pos : pos + name_length]).decode("utf-8", errors="replace")
            pos += name_length
            hvalue_length, pos = decode_varint(data, pos)
            hvalue = None
            if hvalue_length >= 0:
                hvalue = bytes(data[pos : pos + hvalue_length])
                pos += hvalue_length
            headers.append((name, hvalue))
        if pos != record_end:
            raise KafkaError(ErrorCode.CORRUPT_MESSAGE, "a record's fields do not add up to its length")
        timestamp = append_time if append_time is not None else base_timestamp + timestamp_delta
        records.append(Record(base_offset + offset_delta, timestamp, key, value, headers))
    if pos != end:
        raise KafkaError(ErrorCode.CORRUPT_MESSAGE, f"{end - pos} bytes left over after the batch's records")
    return records


def decode_batch(
    buf: bytes | bytearray | memoryview, pos: int = 0, *, verify_crc: bool = True
) -> tuple[RecordBatchHeader, list[Record]]:
    """The batch at `pos` with its records; raises CORRUPT_MESSAGE on any inconsistency."""
    if verify_crc:
        header = validate_batch(buf, pos)
    else:
        header = RecordBatchHeader.parse(buf, pos)
        if header.size > len(buf) - pos:
            raise KafkaError(ErrorCode.CORRUPT_MESSAGE, "record batch runs past the data given")
    body = memoryview(buf)[pos + HEADER_SIZE : pos + header.size]
    return header, _decode_records(header, decompress(header.compression, body))


def decode_batches(
    buf: bytes | bytearray | memoryview, *, verify_crc: bool = True
) -> Iterator[tuple[RecordBatchHeader, list[Record]]]:
    """Every complete batch in `buf`, in order.

    A partial batch at the end is skipped, as a Kafka consumer does: fetch responses cut at
    `max_bytes` may end mid-batch.
    """
    pos = 0
    while True:
        size = peek_batch_size(buf, pos)
        if size is None or size > len(buf) - pos:
            return
        if size < HEADER_SIZE:
            raise KafkaError(ErrorCode.CORRUPT_MESSAGE, f"record batch size {size} is smaller than a header")
        yield decode_batch(buf, pos, verify_crc=verify_crc)
        pos += size


class _Producer(TypedDict):
    """The producer fields every piece of a split batch repeats."""

    producer_id: int
    producer_epoch: int
    transactional: bool


def encode_batches(
    rows: Sequence[RecordRow],
    now_ms: int,
    max_batch_bytes: int,
    *,
    compression: CompressionType = CompressionType.NONE,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
    transactional: bool = False,
) -> list[bytes]:
    """`rows` as one batch, or as several when one would exceed `max_batch_bytes` (each
    piece's base sequence following on from the previous piece's, for a producer's batches).

    The common case encodes once; an oversized batch is halved until the pieces fit, so
    the cost of splitting is only paid by requests that need it.
    """
    producer: _Producer = {"producer_id": producer_id, "producer_epoch": producer_epoch, "transactional": transactional}
    batch = encode_batch(rows, now_ms, compression=compression, base_sequence=base_sequence, **producer)
    if len(batch) <= max_batch_bytes:
        return [batch]
    if len(rows) == 1:
        raise KafkaError(
            ErrorCode.MESSAGE_TOO_LARGE,
            f"a record batch of one record takes {len(batch)} bytes, over max.message.bytes={max_batch_bytes}",
        )
    middle = len(rows) // 2
    second_sequence = base_sequence if base_sequence == NO_SEQUENCE else base_sequence + middle
    return [
        *encode_batches(
            rows[:middle], now_ms, max_batch_bytes, compression=compression, base_sequence=base_sequence, **producer
        ),
        *encode_batches(
            rows[middle:], now_ms, max_batch_bytes, compression=compression, base_sequence=second_sequence, **producer
        ),
    ]


class CheckedBatches:
    """A client's record batches that `validate_client_records` passed, or batches this
    process encoded itself (`encoded_batches`), with each batch's position and header: the
    log appends them without parsing and CRC-checking them again (a small request's batch
    was checked twice, a few µs each time)."""

    __slots__ = ("batches", "view")

    def __init__(self, view: memoryview, batches: list[tuple[int, RecordBatchHeader]]) -> None:
        self.view = view
        self.batches = batches

    def __len__(self) -> int:
        return len(self.view)


def validate_client_records(buf: bytes | bytearray | memoryview) -> CheckedBatches:
    """Check what a client sent before it is stored: every batch's header and CRC, and that
    its records section (decompressed if need be) holds exactly `recordCount` records whose
    lengths add up to it. Returns the batches for `Log.append_as_leader`.

    The CRC only proves the bytes arrived as the client wrote them; a buggy client can
    still send a batch whose records do not match its header, and a consumer that cannot
    parse a stored batch refetches it forever. Kafka's LogValidator walks the records for
    the same reason. This walks only each record's length varint (no keys, values or
    headers are decoded). Raises CORRUPT_MESSAGE or INVALID_RECORD.
    """
    view = memoryview(buf)
    if view.format != "B" or view.ndim != 1:
        view = view.cast("B")
    batches = []
    pos = 0
    while pos < len(view):
        header = validate_batch(view, pos)
        batches.append((pos, header))
        size = header.size
        body = view[pos + HEADER_SIZE : pos + size]
        # bytes, not a memoryview: indexing it is several times faster in this loop.
        data = decompress(header.compression, body) if header.compression else bytes(body)
        if not holds_records(data, 0, len(data), header.record_count):
            raise KafkaError(
                ErrorCode.INVALID_RECORD,
                f"the batch at offset delta 0..{header.last_offset_delta} declares {header.record_count} records "
                f"but its records section does not hold exactly that many",
            )
        pos += size
    return CheckedBatches(view, batches)


def encoded_batches(batches: Sequence[bytes]) -> CheckedBatches:
    """Batches just encoded here (`encode_batches`, `frame_batch`), laid end to end for
    `Log.append_as_leader`: their headers parsed, their CRCs not checked again (they were
    just computed over these bytes)."""
    view = memoryview(batches[0] if len(batches) == 1 else b"".join(batches))
    positions = []
    pos = 0
    for batch in batches:
        positions.append((pos, RecordBatchHeader.parse(view, pos)))
        pos += len(batch)
    return CheckedBatches(view, positions)
