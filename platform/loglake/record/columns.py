"""The fields of many records at once: numpy arrays over joined records sections.

Where a record starts depends on where the one before it ended. With loglake's native
library (`_walk.c`, loaded by `loglake.record.walk`), one C pass over the joined sections
walks the records and reads every field up to the headers on the way, a few nanoseconds a
record. Without it, the starts come from the walk over the records' length varints (the
one the broker runs to check produced batches) and every other field of every record is
then read with numpy over the whole buffer, one pass a field. Both give the same columns
and refuse corrupt records with the same error. Used by the Spark decoder (records to
Arrow), the log cleaner (keys and offsets of whole segments) and the check that a
compacted topic gets keyed records only.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from loglake.errors import ErrorCode, KafkaError, RecordError, RecordValidationError
from loglake.record.compression import decompress
from loglake.record.header import HEADER_SIZE, RecordBatchHeader
from loglake.record.walk import (
    COLUMNS_LONG_VARINT,
    COLUMNS_NOT_RECORDS,
    COLUMNS_PAST_RECORD,
    NativeWalk,
    native,
    sections_record_starts,
)

# Varints are read up to 10 bytes past a position; a joined buffer ends with this padding so
# that a read near its end stays inside it (lengths are checked against record ends after).
PADDING = bytes(16)

_NOT_RECORDS = "a batch's records do not match its record count"
_LONG_VARINT = "varint longer than 10 bytes"
_PAST_RECORD = "a record's fields run past its length"


def _record_starts(data: bytes, section_ends: list[int], counts: list[int]) -> np.ndarray:
    """Where each record starts in `data`, checking each section holds exactly its count."""
    starts = sections_record_starts(data, section_ends, counts)
    if starts is None:
        raise KafkaError(ErrorCode.CORRUPT_MESSAGE, _NOT_RECORDS)
    return starts


def read_varints(buf: np.ndarray, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The zig-zag varints at each position of `pos`, and the positions after them."""
    byte = buf.take(pos)
    value = byte.astype(np.int64)
    more = np.flatnonzero(byte >= 0x80)
    if not more.size:  # the usual case for every field but record lengths: one byte each
        return (value >> 1) ^ -(value & 1), pos + 1
    value[more] &= 0x7F
    size = np.ones(len(pos), dtype=np.int64)
    shift = 7
    while more.size:
        if shift > 63:
            raise KafkaError(ErrorCode.CORRUPT_MESSAGE, _LONG_VARINT)
        byte = buf.take(pos.take(more) + size.take(more))
        # int64 holds the 64 bits; bit 63 wraps to the sign, undone by the masked shift below.
        value[more] |= (byte & 0x7F).astype(np.int64) << shift
        size[more] += 1
        more = more[byte >= 0x80]
        shift += 7
    return ((value >> 1) & 0x7FFF_FFFF_FFFF_FFFF) ^ -(value & 1), pos + size


def check_within(pos: np.ndarray, lengths: np.ndarray, record_ends: np.ndarray) -> None:
    """CORRUPT_MESSAGE unless each field of `lengths[i]` bytes (none if negative: a null) at
    `pos[i]` ends by `record_ends[i]`. Compared as lengths, not as end positions: a corrupt
    length near 2**63 would overflow int64 and pass."""
    if (np.maximum(lengths, 0) > record_ends - pos).any():
        raise KafkaError(ErrorCode.CORRUPT_MESSAGE, _PAST_RECORD)


def byte_ranges(kind: pa.DataType, data: pa.Buffer, starts: np.ndarray, lengths: np.ndarray) -> pa.Array:
    """The byte ranges [start, start + length) of `data` as a binary/string array; a
    negative length is a null. Ranges must be in ascending, non-overlapping order."""
    n = len(starts)
    if n == 0:
        return pa.array([], type=kind)
    valid = lengths >= 0
    walk = native()
    gathered = None if walk is None else walk.gather_ranges(data.address, data.size, starts, lengths)
    if gathered is None:
        offsets, values = _take_ranges(kind, data, starts, np.where(valid, lengths, 0))
    else:
        offsets, values = pa.py_buffer(gathered[0]), pa.py_buffer(gathered[1])
    if valid.all():
        return pa.Array.from_buffers(kind, n, [None, offsets, values])
    bitmap = pa.py_buffer(np.packbits(valid, bitorder="little"))
    return pa.Array.from_buffers(kind, n, [bitmap, offsets, values], null_count=int(n - valid.sum()))


def _take_ranges(
    kind: pa.DataType, data: pa.Buffer, starts: np.ndarray, sizes: np.ndarray
) -> tuple[pa.Buffer, pa.Buffer]:
    """`byte_ranges`' offsets and values buffers without the native library: Arrow's `take`
    (C++) over the ranges and the gaps between them."""
    n = len(starts)
    bounds = np.empty(2 * n, dtype=np.int32)
    bounds[0::2] = starts
    bounds[1::2] = starts + sizes
    # Element 2i is range i, element 2i+1 the bytes between range i and range i+1.
    spans = pa.Array.from_buffers(kind, 2 * n - 1, [None, pa.py_buffer(bounds), data])
    _, offsets, values = spans.take(pa.array(np.arange(0, 2 * n, 2, dtype=np.int32))).buffers()
    return offsets, values


@dataclass(slots=True)
class RecordColumns:
    """One entry per record, in order; positions index the joined buffer. A length of -1
    is a null key or value."""

    starts: np.ndarray
    ends: np.ndarray
    timestamp_delta: np.ndarray
    offset_delta: np.ndarray
    key_pos: np.ndarray
    key_len: np.ndarray
    value_pos: np.ndarray
    value_len: np.ndarray
    header_count: np.ndarray
    header_pos: np.ndarray


def read_record_columns(data: bytes, section_ends: list[int], counts: list[int]) -> RecordColumns:
    """Every record's fields up to its headers. `data` is records sections joined (each
    decompressed), ending with PADDING; `section_ends[i]` is where section i ends and
    `counts[i]` how many records its batch declares. Raises CORRUPT_MESSAGE."""
    walk = native()
    if walk is None:
        return numpy_record_columns(data, section_ends, counts)
    return native_record_columns(walk, data, section_ends, counts)


_NATIVE_ERRORS = {
    COLUMNS_NOT_RECORDS: _NOT_RECORDS,
    COLUMNS_LONG_VARINT: _LONG_VARINT,
    COLUMNS_PAST_RECORD: _PAST_RECORD,
}


def native_record_columns(walk: NativeWalk, data: bytes, section_ends: list[int], counts: list[int]) -> RecordColumns:
    """`read_record_columns` in one C pass."""
    columns = walk.record_columns(data, section_ends, counts)
    if isinstance(columns, int):
        if columns in _NATIVE_ERRORS:
            raise KafkaError(ErrorCode.CORRUPT_MESSAGE, _NATIVE_ERRORS[columns])
        # COLUMNS_OUT_OF_DATA: `data` lacks its PADDING (a caller's bug, not corrupt records):
        # the numpy path fails as it does on it.
        return numpy_record_columns(data, section_ends, counts)
    return RecordColumns(*columns)


def numpy_record_columns(data: bytes, section_ends: list[int], counts: list[int]) -> RecordColumns:
    """`read_record_columns` without the native library: the walk, then numpy passes."""
    starts = _record_starts(data, section_ends, counts)
    buf = np.frombuffer(data, dtype=np.uint8)
    length, pos = read_varints(buf, starts)
    if (length < 0).any():
        raise KafkaError(ErrorCode.CORRUPT_MESSAGE, "a record has a negative length")
    ends = pos + length
    pos = pos + 1  # attributes: unused in magic 2
    timestamp_delta, pos = read_varints(buf, pos)
    offset_delta, pos = read_varints(buf, pos)
    key_len, key_pos = read_varints(buf, pos)
    check_within(key_pos, key_len, ends)
    value_len, value_pos = read_varints(buf, key_pos + np.maximum(key_len, 0))
    check_within(value_pos, value_len, ends)
    header_count, header_pos = read_varints(buf, value_pos + np.maximum(value_len, 0))
    return RecordColumns(
        starts, ends, timestamp_delta, offset_delta, key_pos, key_len, value_pos, value_len, header_count, header_pos
    )


def check_keyed(buf: bytes | bytearray | memoryview, topic_partition: str) -> None:
    """INVALID_RECORD unless every record of the (validated) batches in `buf` has a key:
    what a compacted topic requires (Kafka's LogValidator.validateKey). The error names
    each keyless record by its index in the produced records (KIP-467)."""
    view = memoryview(buf)
    sections, section_ends, counts = [], [], []
    pos = total = 0
    while pos < len(view):
        header = RecordBatchHeader.parse(view, pos)
        body = view[pos + HEADER_SIZE : pos + header.size]
        section = decompress(header.compression, body) if header.compression else bytes(body)
        sections.append(section)
        total += len(section)
        section_ends.append(total)
        counts.append(header.record_count)
        pos += header.size
    sections.append(PADDING)
    keyless = np.flatnonzero(read_record_columns(b"".join(sections), section_ends, counts).key_len < 0)
    if len(keyless):
        message = f"Compacted topic cannot accept message without key in topic partition {topic_partition}."
        raise RecordValidationError([RecordError(int(i), message) for i in keyless])
