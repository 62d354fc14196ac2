"""The per-batch Arrow decoder against the record codec's own per-record decoder."""

from __future__ import annotations

import random

import pytest
from loglake.errors import KafkaError
from loglake.record import walk
from loglake.record.batch import decode_batches, encode_batch
from loglake.record.compression import CompressionType
from loglake.spark.arrow_decoder import decode_fetch
from loglake.spark.kafka_columns import KAFKA_COLUMNS, arrow_schema, default_columns


def random_batches(seed: int) -> tuple[bytes, int]:
    """One batch per codec (the snappy one with LogAppendTime), records of every shape."""
    rnd = random.Random(seed)
    batches, offset = [], 0
    for codec in CompressionType:
        rows = []
        for i in range(rnd.randint(1, 300)):
            key = None if rnd.random() < 0.2 else rnd.randbytes(rnd.randint(0, 20))
            value = None if rnd.random() < 0.1 else rnd.randbytes(rnd.choice([0, 5, 100, 200, 9000]))
            headers = [
                (f"h{j}", None if rnd.random() < 0.3 else rnd.randbytes(3)) for j in range(rnd.choice([0, 1, 3]))
            ]
            rows.append((key, value, headers, 1_700_000_000_000 + i * rnd.randint(0, 100_000)))
        append_time = codec == CompressionType.SNAPPY
        batches.append(
            encode_batch(rows, 1_700_000_000_000, base_offset=offset, compression=codec, log_append_time=append_time)
        )
        offset += len(rows)
    return b"".join(batches), offset


def expected(buf: bytes, start: int, end: int) -> list[dict]:
    return [
        {
            "key": r.key,
            "value": r.value,
            "offset": r.offset,
            "timestamp_ms": r.timestamp,
            "timestampType": int(h.is_log_append_time),
            "headers": [{"key": k, "value": v} for k, v in r.headers] or None,
        }
        for h, records in decode_batches(buf)
        for r in records
        if start <= r.offset < end
    ]


def decoded(buf: bytes, start: int, end: int) -> tuple[list[dict], int]:
    result = decode_fetch(memoryview(buf), "t", 3, start, end, default_columns(True))
    assert result.batch.schema == KAFKA_COLUMNS
    rows = result.batch.to_pylist()
    assert all(r.pop("topic") == "t" and r.pop("partition") == 3 for r in rows)
    for r in rows:
        r["timestamp_ms"] = int(r.pop("timestamp").timestamp() * 1000)
    return rows, result.next_offset


@pytest.mark.parametrize("seed", range(3))
def test_same_records_as_the_record_codec(seed: int) -> None:
    buf, end = random_batches(seed)
    for start, stop in [(0, end), (5, end - 7), (0, 1), (end - 1, end)]:
        rows, next_offset = decoded(buf, start, stop)
        assert rows == expected(buf, start, stop)
        # Everything up to the batch holding `stop - 1` was consumed.
        assert next_offset >= stop


def test_a_partial_batch_at_the_end_is_left_for_the_next_fetch() -> None:
    first = encode_batch([(None, b"a", [], 1)], 1, base_offset=0)
    second = encode_batch([(None, b"b", [], 1), (None, b"c", [], 1)], 1, base_offset=1)
    rows, next_offset = decoded(first + second[:-3], 0, 10)
    assert [r["value"] for r in rows] == [b"a"]
    assert next_offset == 1
    rows, next_offset = decoded(second[:-3], 1, 10)
    assert rows == [] and next_offset == 1


def test_without_headers_column() -> None:
    buf, end = random_batches(7)
    result = decode_fetch(memoryview(buf), "t", 0, 0, end, default_columns(False))
    assert result.batch.schema == arrow_schema(default_columns(False))
    assert result.batch.column("offset").to_pylist() == list(range(end))


@pytest.mark.parametrize("columns", [("value", "partition"), ("headers", "timestamp", "key"), ("offset",)])
def test_only_the_columns_asked_for_in_their_order(columns: tuple[str, ...]) -> None:
    buf, end = random_batches(5)
    every = decode_fetch(memoryview(buf), "t", 2, 3, end - 2, default_columns(True)).batch
    some = decode_fetch(memoryview(buf), "t", 2, 3, end - 2, columns).batch
    assert some.schema == arrow_schema(columns)
    assert some.to_pydict() == every.select(list(columns)).to_pydict()


def test_corrupt_batches_are_refused() -> None:
    batch = bytearray(encode_batch([(b"k", b"value", [], 1)], 1))
    batch[-3] ^= 0xFF  # inside the value: the CRC no longer matches
    with pytest.raises(KafkaError, match="CRC"):
        decode_fetch(memoryview(bytes(batch)), "t", 0, 0, 10, default_columns(False))


def test_the_same_batch_with_and_without_the_native_library(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every column, valid as Arrow sees it, equal whether the records were read and the bytes
    copied by loglake's C library or by numpy and Arrow (a long topic name as well)."""
    buf, end = random_batches(11)
    native = decode_fetch(memoryview(buf), "orders.eu-west-1", 7, 2, end - 3, default_columns(True)).batch
    native.validate(full=True)
    monkeypatch.setattr(walk, "_NATIVE", None)
    without = decode_fetch(memoryview(buf), "orders.eu-west-1", 7, 2, end - 3, default_columns(True)).batch
    without.validate(full=True)
    assert native.equals(without)
    assert set(native.column("topic").to_pylist()) == {"orders.eu-west-1"}
    assert set(native.column("partition").to_pylist()) == {7}
    assert native.column("offset").to_pylist() == list(range(2, end - 3))
