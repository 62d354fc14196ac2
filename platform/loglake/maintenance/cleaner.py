"""The segment-rewrite core of compaction (the role of Kafka's Cleaner), shared by the
broker's cleaner threads and the Spark executor.

Two passes, as in Kafka. `build_offset_map` reads the dirty range [first dirty offset,
first uncleanable offset) and keeps each key's latest offset (stopping early when the map
is full). `clean_log` then rewrites every segment below the map's end, a group of small
segments (up to `segment.bytes`) into one `.cleaned` segment, and swaps each group in
(`Log.replace_segments`). A record is kept when it is its key's latest (or lies past the
map's end) and is not a tombstone past its delete horizon.

Offsets never change: a batch keeps its base offset and last offset delta, its producer
id, epoch and base sequence, and the records it keeps are copied byte for byte (their
offset and timestamp deltas stay valid against the unchanged base offset and timestamp);
only its record count, length, CRC and max timestamp change, and it is recompressed with
its own codec. A batch emptied of records is dropped unless it is the last batch of a
producer the log still knows (it carries the sequence a retry is checked against, Kafka's
rule); then its 61-byte header is kept with no records. (Kafka also keeps the last batch
of a cleaning round; here the active segment, never cleaned, keeps the log's end.)

Transactions, as Kafka's cleaner (`cleaned_transactions`): cleaning never passes the
LSO; batches of aborted transactions never enter the offset map and are removed (below the
map's end); a marker stays while a batch of its transaction remains before it, then gets a
delete horizon like a tombstone and goes after it (a producer's last marker stays emptied);
the cleaned segment's `.txnindex` keeps the entries of the ABORT markers still needed.

Tombstones (KIP-534): the first cleaning that keeps a tombstone sets its batch's delete
horizon (now + delete.retention.ms, in the base timestamp, attribute bit 0x40; record
timestamp deltas are rewritten against it); a cleaning after the horizon drops it.

Work is per batch and per chunk of batches: keys and offsets of a whole chunk are read
with numpy (`loglake.record.columns`), looked up with Arrow's hash join, and the keep/drop
decision is one vectorised comparison; Python loops run over batches.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from loglake.config import LogConfig
from loglake.maintenance.cleaned_transactions import CleanedTransactionMetadata
from loglake.maintenance.offset_map import OffsetMap
from loglake.record.columns import PADDING, byte_ranges, read_record_columns
from loglake.record.compression import compress, decompress
from loglake.record.control import decode_marker
from loglake.record.header import (
    ATTRIBUTES_POS,
    CONTROL_MASK,
    DELETE_HORIZON_MASK,
    HEADER_SIZE,
    LOG_OVERHEAD,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_MASK,
    RecordBatchHeader,
    set_crc,
)
from loglake.record.varint import decode_varint, encode_varint
from loglake.storage.log import Log
from loglake.storage.producer_state import LastRecord
from loglake.storage.segment import INDEX_SUFFIX, LOG_SUFFIX, TIME_INDEX_SUFFIX, LogSegment, filename_prefix
from loglake.storage.segment_swap import CLEANED_SUFFIX
from loglake.storage.transaction_index import TXN_INDEX_SUFFIX

# Bytes read (and decoded) at a time; a bigger batch is read whole.
CHUNK_BYTES = 8 * 1024 * 1024
# attributes, lastOffsetDelta, base/max timestamp, producer id/epoch, base sequence, record count.
_AFTER_CRC = struct.Struct(">hiqqqhii")
# What an emptied batch keeps of its attributes (Kafka's writeEmptyHeader): no codec, no horizon.
_EMPTY_BATCH_ATTRIBUTES = TIMESTAMP_TYPE_MASK | TRANSACTIONAL_MASK | CONTROL_MASK


class LogCleaningAborted(Exception):
    """The log changed under a cleaning (truncated, segments deleted); nothing was swapped."""


@dataclass
class CleanerStats:
    """What one cleaning read and wrote (Kafka's CleanerStats)."""

    map_bytes_read: int = 0
    map_records_read: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    records_read: int = 0
    records_retained: int = 0
    segments_swapped: int = 0
    start_s: float = field(default_factory=time.monotonic)
    end_s: float = 0.0

    @property
    def elapsed_s(self) -> float:
        return (self.end_s or time.monotonic()) - self.start_s


@dataclass(frozen=True)
class CleaningResult:
    end_offset: int
    stats: CleanerStats
    # The earliest delete horizon a kept tombstone's batch now carries (None: no tombstone kept).
    earliest_delete_horizon_ms: int | None


def first_uncleanable_offset(log: Log, high_watermark: int, now_ms: int) -> int:
    """Where cleaning must stop: the active segment, the last stable offset (an open
    transaction's records may still abort), and the first segment with a record younger
    than min.compaction.lag.ms (Kafka's rules)."""
    segments = log.segments
    bound = min(segments[-1].base_offset, log.last_stable_offset(high_watermark))
    lag = log.config.min_compaction_lag_ms
    if lag > 0:
        for segment in segments[:-1]:
            if segment.largest_timestamp > now_ms - lag:
                bound = min(bound, segment.base_offset)
                break
    return bound


def cleanable_bytes(log: Log, first_dirty: int, first_uncleanable: int) -> tuple[int, int]:
    """(clean bytes, dirty bytes) by whole segments, Kafka's dirty-ratio terms."""
    clean = dirty = 0
    segments = log.segments
    for i, segment in enumerate(segments):
        end = segments[i + 1].base_offset if i + 1 < len(segments) else log.log_end_offset
        if end <= first_dirty:
            clean += segment.size
        elif segment.base_offset < first_uncleanable:
            dirty += segment.size
    return clean, dirty


# Reading ---------------------------------------------------------------------------------


def _chunks(segment: LogSegment, start: int, limit: int) -> Iterator[tuple[int, bytes]]:
    """(position, bytes) of runs of whole batches from `start` up to `limit`, about
    CHUNK_BYTES each."""
    run_start = run_end = start
    for batch in segment.log.batches(start, limit):
        if batch.end > limit:
            break
        if batch.end - run_start > CHUNK_BYTES and run_end > run_start:
            yield run_start, segment.log.read(run_start, run_end - run_start)
            run_start = run_end
        run_end = batch.end
    if run_end > run_start:
        yield run_start, segment.log.read(run_start, run_end - run_start)


@dataclass
class _Chunk:
    """The batches of a chunk, with the records of those that were decoded."""

    buf: bytes
    headers: list[RecordBatchHeader]
    positions: list[int]
    decoded: list[int]  # indexes into headers, in order
    data: bytes = b""
    record_batch: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))  # index into `decoded`
    offsets: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))
    keys: pa.Array | None = None
    starts: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))
    ends: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))
    timestamp_delta: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))
    value_len: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))


def _parse(buf: bytes) -> _Chunk:
    """The batch headers of `buf` (nothing decoded yet)."""
    headers, positions = [], []
    pos = 0
    while pos < len(buf):
        header = RecordBatchHeader.parse(buf, pos)
        headers.append(header)
        positions.append(pos)
        pos += header.size
    return _Chunk(buf, headers, positions, [])


def _decode(chunk: _Chunk, which: list[int]) -> None:
    """Read the records of the batches `which` (indexes into the headers, ascending);
    control batches and batches without records are left out."""
    headers, view = chunk.headers, memoryview(chunk.buf)
    sections, section_ends, counts, decoded = [], [], [], []
    total = 0
    for i in which:
        header = headers[i]
        if not header.record_count or header.is_control:
            continue
        at = chunk.positions[i]
        body = view[at + HEADER_SIZE : at + header.size]
        section = decompress(header.compression, body) if header.compression else body
        sections.append(section)
        total += len(section)
        section_ends.append(total)
        counts.append(header.record_count)
        decoded.append(i)
    chunk.decoded = decoded
    if not decoded:
        return
    sections.append(PADDING)
    chunk.data = data = b"".join(sections)
    columns = read_record_columns(data, section_ends, counts)
    chunk.record_batch = np.repeat(np.arange(len(decoded)), counts)
    base_offsets = np.fromiter((headers[i].base_offset for i in decoded), np.int64, len(decoded))
    chunk.offsets = base_offsets[chunk.record_batch] + columns.offset_delta
    chunk.keys = byte_ranges(pa.binary(), pa.py_buffer(data), columns.key_pos, columns.key_len)
    chunk.starts, chunk.ends = columns.starts, columns.ends
    chunk.timestamp_delta, chunk.value_len = columns.timestamp_delta, columns.value_len


# The offset map --------------------------------------------------------------------------


def build_offset_map(log: Log, start: int, end: int, offset_map: OffsetMap, stats: CleanerStats) -> None:
    """Offer every keyed record in [start, end) to `offset_map` in offset order; stops at
    the batch where the map fills. `offset_map.end_offset` is where the mapped range ends."""
    offset_map.start_offset = offset_map.end_offset = start
    txns = CleanedTransactionMetadata(log.collect_aborted_transactions(start, end))
    segments = log.segments
    for i, segment in enumerate(segments):
        next_base = segments[i + 1].base_offset if i + 1 < len(segments) else None
        if next_base is not None and next_base <= start:
            continue
        if segment.base_offset >= end:
            break
        position = segment.offset_index.lookup(start).position if segment.base_offset <= start else 0
        for _, buf in _chunks(segment, position, segment.size):
            chunk = _parse(buf)
            aborted = _transaction_outcomes(chunk, txns)
            _decode(
                chunk,
                [
                    i
                    for i, h in enumerate(chunk.headers)
                    if h.next_offset > start and h.base_offset < end and not aborted[i]
                ],
            )
            stats.map_bytes_read += len(buf)
            if chunk.keys is not None:
                wanted = (chunk.offsets >= start) & (chunk.offsets < end) & (chunk.keys.is_valid().to_numpy(False))
                picked = np.flatnonzero(wanted)
                keys, offsets = chunk.keys.take(pa.array(picked)), chunk.offsets[picked]
                offset_map.add_tombstones(offsets[chunk.value_len[picked] < 0])
                taken = offset_map.put(keys, offsets)
                stats.map_records_read += taken
                if taken < len(offsets):
                    # Full: the mapped range ends at the first record left out (records from
                    # there on are kept as they are, even inside a batch, as in Kafka).
                    offset_map.end_offset = int(offsets[taken])
                    return
            last = chunk.headers[-1].next_offset
            if last >= end:
                offset_map.end_offset = end
                return
            offset_map.end_offset = max(offset_map.end_offset, last)
        if next_base is not None:
            offset_map.end_offset = min(end, max(offset_map.end_offset, next_base))
    offset_map.end_offset = min(end, max(offset_map.end_offset, log.log_end_offset))


# Rewriting -------------------------------------------------------------------------------


def group_segments_by_size(segments: list[LogSegment], max_size: int, max_index_size: int) -> list[list[LogSegment]]:
    """Consecutive segments whose logs fit in `max_size` together (and indexes in
    `max_index_size`), each group to become one segment (Kafka's groupSegmentsBySize)."""
    groups: list[list[LogSegment]] = []
    for segment in segments:
        group = groups[-1] if groups else None
        if (
            group is not None
            and sum(s.size for s in group) + segment.size <= max_size
            and sum(len(s.offset_index) for s in group) + len(segment.offset_index) <= max_index_size // 8
            and segment.base_offset - group[0].base_offset <= 2**31 - 1
        ):
            group.append(segment)
        else:
            groups.append([segment])
    return groups


def clean_log(log: Log, offset_map: OffsetMap, now_ms: int, stats: CleanerStats) -> CleaningResult:
    """Rewrite the rolled segments of `log` holding offsets below `offset_map.end_offset`
    and swap them in, group by group. Raises LogCleaningAborted if the log changed."""
    end = offset_map.end_offset
    first_unstable = log.first_unstable_offset
    if first_unstable is not None and first_unstable < end:
        # An open transaction's records may still abort (a replica that has not yet
        # replicated a marker the plan's maker had): never clean past the LSO.
        raise LogCleaningAborted(f"{log} has a transaction open at {first_unstable}, below {end}; retry")
    truncations = log.truncation_count
    producers = log.last_records_of_producers()
    segments = log.segments
    rolled = [s for s in segments[:-1] if s.base_offset < end]
    config = log.config
    horizon: int | None = None
    # One walk over every rewritten segment, in offset order, as in Kafka: a marker's
    # fate depends on the batches of its transaction met before it.
    txns = CleanedTransactionMetadata()
    if rolled:
        txns.add_aborted_transactions(
            log.collect_aborted_transactions(rolled[0].base_offset, segments[len(rolled)].base_offset)
        )
    for group in group_segments_by_size(rolled, config.segment_bytes, config.segment_index_bytes):
        cleaned = _new_cleaned_segment(log, group[0].base_offset)
        txns.cleaned_index = cleaned.txn_index
        try:
            for segment in group:
                group_horizon = _clean_into(segment, cleaned, offset_map, txns, producers, config, now_ms, stats)
                if group_horizon is not None:
                    horizon = group_horizon if horizon is None else min(horizon, group_horizon)
            cleaned.on_become_inactive()
            cleaned.flush()
        except BaseException:
            cleaned.delete()
            raise
        if not log.replace_segments(cleaned, group, truncations):
            raise LogCleaningAborted(f"{log} changed while it was being cleaned")
        stats.segments_swapped += len(group)
    stats.end_s = time.monotonic()
    return CleaningResult(end, stats, horizon)


def _new_cleaned_segment(log: Log, base_offset: int) -> LogSegment:
    stem = filename_prefix(base_offset)
    for suffix in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX):
        (log.dir / (stem + suffix + CLEANED_SUFFIX)).unlink(missing_ok=True)  # left by an aborted cleaning
    return LogSegment(log.dir, base_offset, log.config, file_suffix=CLEANED_SUFFIX)


def _clean_into(
    source: LogSegment,
    dest: LogSegment,
    offset_map: OffsetMap,
    txns: CleanedTransactionMetadata,
    producers: dict[int, LastRecord],
    config: LogConfig,
    now_ms: int,
    stats: CleanerStats,
) -> int | None:
    """Write the batches of `source` that stay into `dest`; returns the earliest delete
    horizon a kept tombstone or marker now waits for."""
    end = offset_map.end_offset
    horizon: int | None = None
    for _, buf in _chunks(source, 0, source.size):
        stats.bytes_read += len(buf)
        chunk = _parse(buf)
        discardable = _transaction_outcomes(chunk, txns)
        known = _known_outcomes(chunk, offset_map)
        _decode(
            chunk,
            [i for i, h in enumerate(chunk.headers) if h.base_offset < end and i not in known and not discardable[i]],
        )
        keep = _records_to_keep(chunk, offset_map, now_ms)
        stats.records_read += len(chunk.offsets)
        kept_per_batch = (
            np.bincount(chunk.record_batch[keep], minlength=len(chunk.decoded))
            if len(keep)
            else np.zeros(len(chunk.decoded), dtype=np.intp)
        )
        decoded = {i: d for d, i in enumerate(chunk.decoded)}
        record_index = 0
        for i, header in enumerate(chunk.headers):
            at = chunk.positions[i]
            d = decoded.get(i)
            outcome = known.get(i)
            batch_horizon: int | None = None
            if header.base_offset >= end:
                out = buf[at : at + header.size]  # past the map's end: as it is
            elif header.is_control:
                marker, batch_horizon = _clean_marker(
                    buf[at : at + header.size], header, discardable[i], producers, config, now_ms
                )
                if marker is None:
                    continue
                out = marker
            elif discardable[i]:
                # A batch of an aborted transaction: no reader is ever shown its records.
                stats.records_read += header.record_count
                if not _is_producers_last(header, producers):
                    continue
                out = _empty_batch(header)
            elif outcome is not None:
                stats.records_read += header.record_count
                if outcome:
                    stats.records_retained += header.record_count
                    out = buf[at : at + header.size]
                elif _is_producers_last(header, producers):
                    out = _empty_batch(header)
                else:
                    continue
            elif d is None:
                # A batch emptied by an earlier cleaning: it goes once nothing needs it.
                if not _is_producers_last(header, producers):
                    continue
                out = buf[at : at + header.size]
            else:
                count = header.record_count
                rows = np.arange(record_index, record_index + count)
                record_index += count
                kept = int(kept_per_batch[d])
                stats.records_retained += kept
                tombstones = bool(kept) and bool((chunk.value_len[rows][keep[rows]] < 0).any())
                needs_horizon = tombstones and not header.attributes & DELETE_HORIZON_MASK
                if kept == count and not needs_horizon:
                    out = buf[at : at + header.size]
                elif kept:
                    new_horizon = now_ms + config.delete_retention_ms if needs_horizon else None
                    out = _rebuild(header, chunk, rows[keep[rows]], new_horizon)
                elif _is_producers_last(header, producers):
                    out = _empty_batch(header)
                else:
                    continue
                if tombstones:
                    batch_horizon = new_horizon if needs_horizon else header.base_timestamp
            if batch_horizon is not None:
                horizon = batch_horizon if horizon is None else min(horizon, batch_horizon)
            written = RecordBatchHeader.parse(out)
            dest.append(out, written.last_offset, written.max_timestamp, written.last_offset)
            stats.bytes_written += len(out)
    return horizon


def _transaction_outcomes(chunk: _Chunk, txns: CleanedTransactionMetadata) -> list[bool]:
    """Per batch of the chunk, fed to `txns` in offset order: a data batch of an aborted
    transaction, or a marker whose transaction has no data left (Kafka's shouldDiscardBatch)."""
    outcomes = []
    for header, at in zip(chunk.headers, chunk.positions):
        if header.is_control:
            marker = decode_marker(chunk.buf[at : at + header.size]) if header.record_count else None
            outcomes.append(txns.on_control_batch_read(header, marker))
        else:
            outcomes.append(txns.on_batch_read(header))
    return outcomes


def _clean_marker(
    batch: bytes,
    header: RecordBatchHeader,
    discardable: bool,
    producers: dict[int, LastRecord],
    config: LogConfig,
    now_ms: int,
) -> tuple[bytes | None, int | None]:
    """A control batch after cleaning (None: dropped), and the delete horizon it waits
    for. Kafka piggy-backs markers on the tombstone rule: a marker whose transaction has
    no data left first gets a delete horizon, and goes at the first cleaning after it; a
    producer's last marker (its epoch, for fencing) is kept, emptied once it could go."""
    has_horizon = bool(header.attributes & DELETE_HORIZON_MASK)
    if not header.record_count or (discardable and has_horizon and header.base_timestamp <= now_ms):
        return (_empty_batch(header) if _is_producers_last(header, producers) else None), None
    if not discardable:
        return batch, None
    if has_horizon:
        return batch, header.base_timestamp
    delete_horizon = now_ms + config.delete_retention_ms
    return _with_delete_horizon(batch, header, delete_horizon), delete_horizon


def _known_outcomes(chunk: _Chunk, offset_map: OffsetMap) -> dict[int, bool]:
    """Batches of the mapped dirty range whose fate the map alone tells, without decoding
    them: every record kept (True) or none (False). A record there is kept exactly when its
    offset is its key's latest, so a batch keeps as many records as latest offsets fall in
    its range; batches holding a kept tombstone are left to the decoder (delete horizon)."""
    latest, tombstones = offset_map.sorted_latest_offsets()
    if tombstones is None:
        return {}
    start, end = offset_map.start_offset, offset_map.end_offset
    picks = [
        i
        for i, h in enumerate(chunk.headers)
        if h.base_offset >= start and h.last_offset < end and h.record_count and not h.is_control
    ]
    if not picks:
        return {}
    first = np.fromiter((chunk.headers[i].base_offset for i in picks), np.int64, len(picks))
    after = np.fromiter((chunk.headers[i].last_offset + 1 for i in picks), np.int64, len(picks))
    kept = np.searchsorted(latest, after) - np.searchsorted(latest, first)
    kept_tombstones = np.searchsorted(tombstones, after) - np.searchsorted(tombstones, first)
    counts = np.fromiter((chunk.headers[i].record_count for i in picks), np.int64, len(picks))
    return {
        i: bool(k)
        for i, k, t, c in zip(picks, kept.tolist(), kept_tombstones.tolist(), counts.tolist())
        if not t and (k == 0 or k == c)
    }


def _is_producers_last(header: RecordBatchHeader, producers: dict[int, LastRecord]) -> bool:
    """The batch holding a live producer's last sequence, or, when its epoch has no data
    yet, its marker of that epoch (Kafka's isBatchLastRecordOfProducer)."""
    last = producers.get(header.producer_id) if header.producer_id >= 0 else None
    if last is None:
        return False
    if last.last_data_offset is not None:
        return header.last_offset == last.last_data_offset
    return header.is_control and header.producer_epoch == last.producer_epoch


def _records_to_keep(chunk: _Chunk, offset_map: OffsetMap, now_ms: int) -> np.ndarray:
    """Per decoded record: its key's latest (or past the map's end), and not a tombstone
    whose batch's delete horizon has passed. Null keys are dropped, as in Kafka."""
    if chunk.keys is None:
        return np.empty(0, dtype=bool)
    latest = offset_map.latest_offsets(chunk.keys)
    has_key = chunk.keys.is_valid().to_numpy(zero_copy_only=False)
    is_latest = has_key & (chunk.offsets >= latest)
    horizon_passed = np.fromiter(
        (
            bool(chunk.headers[i].attributes & DELETE_HORIZON_MASK) and chunk.headers[i].base_timestamp <= now_ms
            for i in chunk.decoded
        ),
        bool,
        len(chunk.decoded),
    )[chunk.record_batch]
    dropped_tombstone = (chunk.value_len < 0) & horizon_passed
    return (chunk.offsets >= offset_map.end_offset) | (is_latest & ~dropped_tombstone)


def _rebuild(header: RecordBatchHeader, chunk: _Chunk, rows: np.ndarray, delete_horizon: int | None) -> bytes:
    """The batch with only records `rows`; with `delete_horizon`, the base timestamp
    becomes the horizon and each record's timestamp delta is rewritten against it."""
    data = chunk.data
    starts, ends = chunk.starts[rows].tolist(), chunk.ends[rows].tolist()
    base_timestamp = header.base_timestamp
    attributes = header.attributes
    if delete_horizon is None:
        records = b"".join([data[s:e] for s, e in zip(starts, ends)])
    else:
        shift = base_timestamp - delete_horizon
        records = b"".join([_with_timestamp_shift(data, s, e, shift) for s, e in zip(starts, ends)])
        base_timestamp = delete_horizon
        attributes |= DELETE_HORIZON_MASK
    if header.is_log_append_time:
        max_timestamp = header.max_timestamp
    else:
        max_timestamp = header.base_timestamp + int(chunk.timestamp_delta[rows].max())
    if header.compression:
        records = compress(header.compression, records)
    return _batch(header, attributes, base_timestamp, max_timestamp, len(rows), records)


def _with_delete_horizon(batch: bytes, header: RecordBatchHeader, delete_horizon: int) -> bytes:
    """The whole batch with `delete_horizon` as its base timestamp (every record kept)."""
    body = memoryview(batch)[HEADER_SIZE:]
    data = bytes(decompress(header.compression, body) if header.compression else body)
    shift = header.base_timestamp - delete_horizon
    records, pos = [], 0
    for _ in range(header.record_count):
        length, after = decode_varint(data, pos)
        records.append(_with_timestamp_shift(data, pos, after + length, shift))
        pos = after + length
    out = b"".join(records)
    if header.compression:
        out = compress(header.compression, out)
    attributes = header.attributes | DELETE_HORIZON_MASK
    return _batch(header, attributes, delete_horizon, header.max_timestamp, header.record_count, out)


def _with_timestamp_shift(data: bytes, start: int, end: int, shift: int) -> bytes:
    _, pos = decode_varint(data, start)  # the record's length: rewritten below
    attributes = data[pos : pos + 1]
    delta, after = decode_varint(data, pos + 1)
    rest = data[after:end]
    body = attributes + encode_varint(delta + shift) + rest
    return encode_varint(len(body)) + body


def _empty_batch(header: RecordBatchHeader) -> bytes:
    """The header alone (no records), keeping offsets and producer metadata (Kafka's
    writeEmptyHeader; its base timestamp is the max timestamp)."""
    attributes = header.attributes & _EMPTY_BATCH_ATTRIBUTES
    return _batch(header, attributes, header.max_timestamp, header.max_timestamp, 0, b"")


def _batch(
    header: RecordBatchHeader, attributes: int, base_timestamp: int, max_timestamp: int, count: int, records: bytes
) -> bytes:
    out = bytearray(HEADER_SIZE + len(records))
    out[0:8] = header.base_offset.to_bytes(8, "big", signed=True)
    out[8:12] = (HEADER_SIZE - LOG_OVERHEAD + len(records)).to_bytes(4, "big", signed=True)
    out[12:16] = header.partition_leader_epoch.to_bytes(4, "big", signed=True)
    out[16] = header.magic
    _AFTER_CRC.pack_into(
        out,
        ATTRIBUTES_POS,
        attributes,
        header.last_offset_delta,
        base_timestamp,
        max_timestamp,
        header.producer_id,
        header.producer_epoch,
        header.base_sequence,
        count,
    )
    out[HEADER_SIZE:] = records
    set_crc(out, 0, len(out))
    return bytes(out)
