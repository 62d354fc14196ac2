"""Fetched record batches → one Arrow RecordBatch of the Kafka source's columns asked for.

Decoding is per batch, not per record: the batch headers are parsed one by one (a few
per megabyte), the records sections are inflated and joined into one buffer, and every
field of every record up to its headers is read over that buffer at once
(`loglake.record.columns`: one C pass with the record walk the broker also uses to check
produced batches; numpy passes without the native library). Keys, values and header fields
are copied out of the joined buffer into Arrow arrays by `byte_ranges` (C; Arrow's `take`
without the library); the other columns are built from per-batch values with numpy, no
per-record Python.

This is the one place that sees batch attributes, so it is where control batches are
skipped and, for read_committed, the batches of aborted transactions (the Fetch answer
lists them) are left out.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from loglake.errors import ErrorCode, KafkaError
from loglake.record.aborted import AbortedTransactionFilter
from loglake.record.columns import PADDING, byte_ranges, check_within, read_record_columns, read_varints
from loglake.record.compression import decompress
from loglake.record.header import HEADER_SIZE, validate_batch
from loglake.spark.kafka_columns import HEADERS_COLUMN, HEADERS_TYPE, arrow_schema

# The column `decode_fetch_flagging_aborted` adds.
ABORTED_FLAG = "aborted"


@dataclass(slots=True)
class DecodedFetch:
    """The records of one fetch answer that fall in the requested range."""

    batch: pa.RecordBatch
    # Where the next fetch starts: past the last complete batch of the answer (the start
    # offset itself when the answer held no complete batch).
    next_offset: int


@dataclass(slots=True)
class _Sections:
    """The records sections of the batches kept, joined, with per-batch facts."""

    data: bytes
    section_ends: list[int]
    record_counts: list[int]
    base_offsets: list[int]
    base_timestamps: list[int]
    # the batch's max timestamp when it carries LogAppendTime, else -1
    append_times: list[int]
    next_offset: int


def _collect_sections(buf: memoryview, start: int, end: int, aborted: Sequence[tuple[int, int]]) -> _Sections:
    parts: list[bytes | memoryview] = []
    section_ends: list[int] = []
    counts: list[int] = []
    base_offsets: list[int] = []
    base_timestamps: list[int] = []
    append_times: list[int] = []
    next_offset = start
    size_so_far = 0
    pos = 0
    skipped = AbortedTransactionFilter(aborted)
    while len(buf) - pos >= 12:
        size = int.from_bytes(buf[pos + 8 : pos + 12], "big", signed=True) + 12
        if size > len(buf) - pos:
            break  # a partial batch cut at the fetch size: the next fetch starts there
        header = validate_batch(buf, pos)
        pos += header.size
        if header.base_offset >= end:
            break
        next_offset = header.next_offset
        if skipped.skips(header) or header.next_offset <= start or header.record_count == 0:
            continue
        body = buf[pos - header.size + HEADER_SIZE : pos]
        section = decompress(header.compression, body) if header.compression else body
        parts.append(section)
        size_so_far += len(section)
        section_ends.append(size_so_far)
        counts.append(header.record_count)
        base_offsets.append(header.base_offset)
        base_timestamps.append(header.base_timestamp)
        append_times.append(header.max_timestamp if header.is_log_append_time else -1)
    parts.append(PADDING)
    return _Sections(b"".join(parts), section_ends, counts, base_offsets, base_timestamps, append_times, next_offset)


def _headers(
    buf: np.ndarray, data: pa.Buffer, header_pos: np.ndarray, counts: np.ndarray, record_ends: np.ndarray
) -> pa.Array:
    """The headers column: one list per record (null without headers), read header index by
    header index across all records at once."""
    if (counts < 0).any():
        raise KafkaError(ErrorCode.CORRUPT_MESSAGE, "a record has a negative header count")
    pos = header_pos.copy()
    key_starts, key_lengths, value_starts, value_lengths = [], [], [], []
    active = np.flatnonzero(counts > 0)
    k = 0
    while active.size:
        p = pos[active]
        key_len, p = read_varints(buf, p)
        if (key_len < 0).any():
            raise KafkaError(ErrorCode.CORRUPT_MESSAGE, "a record header has a null key")
        key_starts.append(p)
        key_lengths.append(key_len)
        ends = record_ends[active]
        check_within(p, key_len, ends)
        value_len, p = read_varints(buf, p + key_len)
        value_starts.append(p)
        value_lengths.append(value_len)
        check_within(p, value_len, ends)
        p = p + np.maximum(value_len, 0)
        pos[active] = p
        k += 1
        active = active[counts[active] > k]
    if (pos != record_ends).any():
        raise KafkaError(ErrorCode.CORRUPT_MESSAGE, "a record's fields do not add up to its length")
    if key_starts:
        key_start = np.concatenate(key_starts)
        # Header k of record i lies before header k+1 and before record i+1: position order
        # is (record, header index) order.
        order = np.argsort(key_start, kind="stable")
        keys = byte_ranges(pa.string(), data, key_start[order], np.concatenate(key_lengths)[order])
        values = byte_ranges(
            pa.binary(), data, np.concatenate(value_starts)[order], np.concatenate(value_lengths)[order]
        )
    else:
        keys, values = pa.array([], pa.string()), pa.array([], pa.binary())
    entries = pa.StructArray.from_arrays([keys, values], fields=list(HEADERS_TYPE.value_type))
    offsets = np.zeros(len(counts) + 1, dtype=np.int32)
    np.cumsum(counts, out=offsets[1:])
    return pa.ListArray.from_arrays(pa.array(offsets), entries, type=HEADERS_TYPE, mask=pa.array(counts == 0))


def decode_fetch(
    records: memoryview,
    topic: str,
    partition: int,
    start: int,
    end: int,
    columns: Sequence[str],
    aborted: Sequence[tuple[int, int]] = (),
) -> DecodedFetch:
    """The records of a fetch answer with offsets in [start, end), as the Kafka source's
    `columns` (any of them, in any order; only those are built). `aborted`: the answer's
    aborted transactions (producer id, first offset), whose records are left out
    (read_committed); control batches never show."""
    sections = _collect_sections(records, start, end, aborted)
    data = sections.data
    fields = read_record_columns(data, sections.section_ends, sections.record_counts)
    schema = arrow_schema(columns)
    if not len(fields.starts):
        return DecodedFetch(_empty(schema), sections.next_offset)

    counts = sections.record_counts
    record_ends, timestamp_delta, offset_delta = fields.ends, fields.timestamp_delta, fields.offset_delta
    key_pos, key_len, value_pos, value_len = fields.key_pos, fields.key_len, fields.value_pos, fields.value_len
    header_count, header_pos = fields.header_count, fields.header_pos

    offsets = np.repeat(np.asarray(sections.base_offsets, dtype=np.int64), counts) + offset_delta
    keep = (offsets >= start) & (offsets < end)
    picked = None if keep.all() else np.flatnonzero(keep)
    if picked is not None:
        offsets, timestamp_delta = offsets[picked], timestamp_delta[picked]
        key_pos, key_len, value_pos, value_len = key_pos[picked], key_len[picked], value_pos[picked], value_len[picked]
        header_count, header_pos, record_ends = header_count[picked], header_pos[picked], record_ends[picked]
    n = len(offsets)
    arrow_data = pa.py_buffer(data)
    wanted = set(columns)
    if HEADERS_COLUMN not in wanted and ((header_count == 0) & (header_pos != record_ends)).any():
        raise KafkaError(ErrorCode.CORRUPT_MESSAGE, "a record's fields do not add up to its length")

    def per_record(batch_values: list[int]) -> np.ndarray:
        """A value of each batch, for each of its records kept (a new array)."""
        repeated = np.repeat(np.asarray(batch_values, dtype=np.int64), counts)
        return repeated if picked is None else repeated[picked]

    def timestamps() -> pa.Array:
        stamps = per_record(sections.base_timestamps)
        stamps += timestamp_delta
        if max(sections.append_times) >= 0:  # LogAppendTime batches: the broker's time instead
            log_append = per_record(sections.append_times)
            stamps = np.where(log_append >= 0, log_append, stamps)
        stamps *= 1000
        return pa.Array.from_buffers(schema.field("timestamp").type, n, [None, pa.py_buffer(stamps)])

    builders = {
        "key": lambda: byte_ranges(pa.binary(), arrow_data, key_pos, key_len),
        "value": lambda: byte_ranges(pa.binary(), arrow_data, value_pos, value_len),
        "topic": lambda: _repeated_string(topic, n),
        "partition": lambda: pa.array(np.full(n, partition, dtype=np.int32)),
        "offset": lambda: pa.array(offsets, type=pa.int64()),
        "timestamp": timestamps,
        "timestampType": lambda: pa.array(per_record([int(t >= 0) for t in sections.append_times]).astype(np.int32)),
        HEADERS_COLUMN: lambda: _headers(
            np.frombuffer(data, dtype=np.uint8), arrow_data, header_pos, header_count, record_ends
        ),
    }
    arrays = [builders[name]() for name in columns]
    return DecodedFetch(pa.RecordBatch.from_arrays(arrays, schema=schema), sections.next_offset)


def _repeated_string(value: str, n: int) -> pa.Array:
    """`value` n times, built from its buffers (~0.5 ns an item; pa.repeat of a scalar ~2.5)."""
    raw = value.encode()
    if len(raw) * n > np.iinfo(np.int32).max:
        return pa.repeat(pa.scalar(value, pa.string()), n)  # past int32 offsets: Arrow says so
    offsets = np.arange(n + 1, dtype=np.int32) * np.int32(len(raw))
    return pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(offsets), pa.py_buffer(raw * n)])


def _empty(schema: pa.Schema) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays([pa.array([], type=f.type) for f in schema], schema=schema)


def aborted_flags(records: memoryview, offsets: np.ndarray, aborted: Sequence[tuple[int, int]]) -> np.ndarray:
    """Per offset of `offsets` (records decoded from `records` without skipping aborted
    transactions): whether a read_committed reader leaves it out, as the answer's `aborted`
    list and its markers say. Only batch headers are read again (a few per megabyte)."""
    skipped = AbortedTransactionFilter(aborted)
    firsts: list[int] = []
    lasts: list[int] = []
    pos = 0
    while len(records) - pos >= 12:
        size = int.from_bytes(records[pos + 8 : pos + 12], "big", signed=True) + 12
        if size > len(records) - pos:
            break
        header = validate_batch(records, pos)
        pos += header.size
        if skipped.skips(header) and not header.is_control:
            firsts.append(header.base_offset)
            lasts.append(header.last_offset)
    if not firsts:
        return np.zeros(len(offsets), dtype=bool)
    # Batches are in offset order and do not overlap: the batch an offset may fall in is the
    # last one starting at or before it.
    index = np.searchsorted(np.asarray(firsts, dtype=np.int64), offsets, side="right") - 1
    inside = index >= 0
    flags = np.zeros(len(offsets), dtype=bool)
    flags[inside] = offsets[inside] <= np.asarray(lasts, dtype=np.int64)[index[inside]]
    return flags


def decode_fetch_flagging_aborted(
    records: memoryview,
    topic: str,
    partition: int,
    start: int,
    end: int,
    columns: Sequence[str],
    aborted: Sequence[tuple[int, int]],
) -> DecodedFetch:
    """What a read_uncommitted reader sees of [start, end) (control batches never), as
    `columns` (which must hold `offset`) with a last column `aborted`: the record belongs to
    an aborted transaction (of the answer's `aborted` list, which a read_committed Fetch carries)."""
    decoded = decode_fetch(records, topic, partition, start, end, columns)
    offsets = decoded.batch.column("offset").to_numpy()
    flags = pa.array(aborted_flags(records, offsets, aborted), type=pa.bool_())
    return DecodedFetch(decoded.batch.append_column(pa.field(ABORTED_FLAG, pa.bool_()), flags), decoded.next_offset)
