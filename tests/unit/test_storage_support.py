"""Batch builders and decoders shared by the storage tests (imported as a module).

Batches come from kafka-python's own encoder, so the storage engine is tested against
bytes a real client produces, independently of loglake's record codec.
"""

from __future__ import annotations

from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from loglake.record.header import (
    RecordBatchHeader,
    peek_batch_size,
    set_base_offset,
    set_partition_leader_epoch,
    validate_batch,
)

COMPRESSION_GZIP = 1


def make_batch(
    count: int = 1,
    timestamp: int = 1_000,
    value_size: int = 10,
    compression: int = 0,
    timestamp_step: int = 1,
    tag: int = 0,
) -> bytes:
    """One magic-2 batch of `count` records; record i has timestamp `timestamp + i * step`
    and a value that encodes `tag` and i (so batches are told apart)."""
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=compression,
        is_transactional=0,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=1 << 30,
    )
    for i in range(count):
        value = f"{tag}:{i}:".encode().ljust(value_size, b"v")
        builder.append(i, timestamp=timestamp + i * timestamp_step, key=None, value=value, headers=[])
    return bytes(builder.build())


def stamped(batch: bytes, offset: int, leader_epoch: int | None = None) -> bytes:
    """The batch as the log stores it: base offset (and leader epoch) rewritten."""
    out = bytearray(batch)
    set_base_offset(out, 0, offset)
    if leader_epoch is not None:
        set_partition_leader_epoch(out, 0, leader_epoch)
    return bytes(out)


def split_batches(data: bytes) -> list[bytes]:
    """The batches of a byte string, each validated (length, magic, CRC)."""
    out, pos = [], 0
    while pos < len(data):
        size = peek_batch_size(data, pos)
        assert size is not None, f"{len(data) - pos} trailing bytes"
        validate_batch(data, pos)
        out.append(data[pos : pos + size])
        pos += size
    return out


def headers_of(data: bytes) -> list[RecordBatchHeader]:
    return [RecordBatchHeader.parse(b) for b in split_batches(data)]


def records_of(data: bytes) -> list[tuple[int, int, bytes]]:
    """(offset, timestamp, value) of every record, decoded by kafka-python."""
    out = []
    for batch in split_batches(data):
        out += [(r.offset, r.timestamp, r.value) for r in DefaultRecordBatch(batch)]
    return out


def test_kafka_python_batches_pass_our_validation() -> None:
    for compression in (0, COMPRESSION_GZIP):
        batch = make_batch(5, timestamp=7, compression=compression)
        header = validate_batch(batch)
        assert (header.record_count, header.last_offset_delta, header.max_timestamp) == (5, 4, 11)
        assert [offset for offset, _, _ in records_of(batch)] == [0, 1, 2, 3, 4]
