"""The record-batch codec, against itself (hypothesis) and against kafka-python's."""

from __future__ import annotations

import struct

import crc32c
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords

from loglake.errors import ErrorCode, KafkaError
from loglake.record.batch import decode_batch, decode_batches, encode_batch
from loglake.record.compression import CompressionType, compress, decompress
from loglake.record.header import RecordBatchHeader, set_base_offset, validate_batch
from loglake.record.varint import decode_varint, encode_varint

CODECS = list(CompressionType)

ROWS = [
    (b"key-0", b"value-0", [], 1_700_000_000_000),
    (None, b"no key", [("trace", b"abc"), ("empty", b""), ("null", None)], 1_700_000_000_005),
    (b"tombstone", None, [], 1_699_999_999_000),  # timestamps need not increase
    (b"", b"", [], 1_700_000_000_010),
    (b"big", bytes(range(256)) * 400, [], 1_700_000_000_011),
]


@pytest.mark.parametrize("n", [0, 1, -1, 63, -64, 64, 300, -300, 2**31 - 1, -(2**31), 2**63 - 1, -(2**63)])
def test_varint_round_trip(n: int) -> None:
    data = encode_varint(n)
    assert decode_varint(data, 0) == (n, len(data))


def test_varint_matches_kafka_zigzag() -> None:
    # Examples from Kafka's ByteUtilsTest: zig-zag maps 0,-1,1,-2 to 0,1,2,3.
    assert [encode_varint(n) for n in (0, -1, 1, -2, 150)] == [b"\x00", b"\x01", b"\x02", b"\x03", b"\xac\x02"]


def test_truncated_varint_is_corrupt() -> None:
    with pytest.raises(KafkaError) as err:
        decode_varint(b"\x80\x80", 0)
    assert err.value.code == ErrorCode.CORRUPT_MESSAGE


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
def test_round_trip_every_codec(codec: CompressionType) -> None:
    data = encode_batch(ROWS, 42, base_offset=1000, compression=codec, partition_leader_epoch=7)
    header, records = decode_batch(data)
    assert header.compression == codec
    assert header.base_offset == 1000 and header.record_count == len(ROWS) and header.last_offset_delta == len(ROWS) - 1
    assert header.partition_leader_epoch == 7
    assert header.base_timestamp == ROWS[0][3]
    assert header.max_timestamp == max(r[3] for r in ROWS)
    assert [(r.offset, r.key, r.value, r.headers, r.timestamp) for r in records] == [
        (1000 + i, k, v, list(h), ts) for i, (k, v, h, ts) in enumerate(ROWS)
    ]


def test_header_fields_and_attribute_bits() -> None:
    data = encode_batch(
        [(b"k", b"v", [], None)],
        1234,
        producer_id=99,
        producer_epoch=3,
        base_sequence=17,
        transactional=True,
        control=True,
        log_append_time=True,
    )
    header = validate_batch(data)
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (99, 3, 17)
    assert header.is_transactional and header.is_control and header.is_log_append_time
    assert header.size == len(data)
    assert header.crc == crc32c.crc32c(data[21:])


def test_log_append_time_gives_every_record_the_batch_max_timestamp() -> None:
    data = bytearray(encode_batch([(b"a", b"1", [], 5), (b"b", b"2", [], 9)], 0))
    # Flip the timestamp type and rewrite maxTimestamp, as a broker with LogAppendTime does.
    struct.pack_into(">h", data, 21, struct.unpack_from(">h", data, 21)[0] | 0x08)
    struct.pack_into(">q", data, 35, 777)
    struct.pack_into(">I", data, 17, crc32c.crc32c(bytes(data[21:])))
    _, records = decode_batch(data)
    assert [r.timestamp for r in records] == [777, 777]


def test_offsets_rewritten_in_place_keep_the_crc_valid() -> None:
    data = bytearray(encode_batch(ROWS, 0))
    set_base_offset(data, 0, 5_000_000_000)
    header, records = decode_batch(data)
    assert header.base_offset == 5_000_000_000
    assert records[-1].offset == 5_000_000_000 + len(ROWS) - 1


def test_decode_batches_skips_a_partial_tail() -> None:
    one = encode_batch(ROWS[:2], 0)
    two = encode_batch(ROWS[2:], 0, base_offset=2)
    batches = list(decode_batches(one + two[: len(two) // 2]))
    assert len(batches) == 1
    assert len(list(decode_batches(one + two))) == 2


@pytest.mark.parametrize(
    "damage",
    [
        lambda b: b.__setitem__(len(b) - 1, b[-1] ^ 0xFF),  # record byte: CRC mismatch
        lambda b: b.__setitem__(16, 1),  # magic 1
        lambda b: struct.pack_into(">i", b, 8, 5),  # batch length too small
    ],
)
def test_damaged_batch_is_corrupt(damage) -> None:
    data = bytearray(encode_batch(ROWS[:2], 0))
    damage(data)
    with pytest.raises(KafkaError) as err:
        decode_batch(data)
    assert err.value.code in (ErrorCode.CORRUPT_MESSAGE, ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT)


def test_record_count_lying_about_records_is_corrupt() -> None:
    data = bytearray(encode_batch(ROWS[:2], 0))
    struct.pack_into(">i", data, 57, 3)
    struct.pack_into(">I", data, 17, crc32c.crc32c(bytes(data[21:])))
    with pytest.raises(KafkaError) as err:
        decode_batch(data)
    assert err.value.code == ErrorCode.CORRUPT_MESSAGE


@pytest.mark.parametrize("codec", CODECS[1:], ids=lambda c: c.name)
def test_garbage_compressed_payload_is_corrupt(codec: CompressionType) -> None:
    with pytest.raises(KafkaError) as err:
        decompress(codec, b"\x00\x01garbage that is not compressed" * 3)
    assert err.value.code == ErrorCode.CORRUPT_MESSAGE


def test_snappy_reads_raw_and_xerial_framing() -> None:
    import snappy  # python-snappy: an independent implementation of both framings

    payload = b"0123456789" * 10_000
    assert decompress(CompressionType.SNAPPY, snappy.compress(payload)) == payload
    from kafka.codec import snappy_decode, snappy_encode

    assert decompress(CompressionType.SNAPPY, snappy_encode(payload, xerial_compatible=True)) == payload
    assert snappy_decode(compress(CompressionType.SNAPPY, payload)) == payload


# -- kafka-python cross-check ------------------------------------------------------------


def _kafka_python_batch(codec: CompressionType, rows, *, producer_id=-1, producer_epoch=-1, base_sequence=-1) -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=int(codec),
        is_transactional=False,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        batch_size=10_000_000,
    )
    for i, (key, value, headers, ts) in enumerate(rows):
        assert builder.append(i, timestamp=ts, key=key, value=value, headers=list(headers)) is not None
    return bytes(builder.build())


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
def test_kafka_python_batches_decode_with_ours(codec: CompressionType) -> None:
    data = _kafka_python_batch(codec, ROWS, producer_id=12, producer_epoch=1, base_sequence=40)
    header, records = decode_batch(data)
    assert header.compression == codec
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (12, 1, 40)
    assert [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in records] == [
        (i, ts, k, v, list(h)) for i, (k, v, h, ts) in enumerate(ROWS)
    ]


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
def test_our_batches_decode_with_kafka_python(codec: CompressionType) -> None:
    data = encode_batch(ROWS, 0, base_offset=300, compression=codec, producer_id=5, producer_epoch=2, base_sequence=9)
    batch = MemoryRecords(data).next_batch()
    assert batch.validate_crc()
    assert batch.compression_type == int(codec)
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (5, 2, 9)
    got = [(r.offset, r.timestamp, r.key, r.value, [(k, v) for k, v in r.headers]) for r in batch]
    assert got == [(300 + i, ts, k, v, list(h)) for i, (k, v, h, ts) in enumerate(ROWS)]


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
def test_uncompressed_bytes_identical_to_kafka_python(codec: CompressionType) -> None:
    rows = [(b"k", b"v" * 10, [("h", b"1")], 1000 + i) for i in range(5)]
    # kafka-python leaves the partition leader epoch at 0 where Java writes -1.
    ours = encode_batch(rows, 0, compression=codec, partition_leader_epoch=0)
    theirs = _kafka_python_batch(codec, rows)
    if codec == CompressionType.NONE:
        assert ours == theirs
    else:
        # Compressed bytes may differ by codec settings; the headers and records must not.
        assert RecordBatchHeader.parse(ours).record_count == RecordBatchHeader.parse(theirs).record_count
        assert [r for _, rs in decode_batches(ours) for r in rs] == [r for _, rs in decode_batches(theirs) for r in rs]


# -- properties ---------------------------------------------------------------------------

_bytes = st.one_of(st.none(), st.binary(max_size=300))
_header = st.tuples(st.text(max_size=20), st.one_of(st.none(), st.binary(max_size=50)))
_row = st.tuples(_bytes, _bytes, st.lists(_header, max_size=4), st.integers(0, 2**50))


@settings(max_examples=150, deadline=None)
@given(
    rows=st.lists(_row, min_size=1, max_size=40),
    codec=st.sampled_from(CODECS),
    base_offset=st.integers(0, 2**62),
)
def test_property_round_trip(rows, codec, base_offset) -> None:
    data = encode_batch(rows, 0, base_offset=base_offset, compression=codec)
    header, records = decode_batch(data)
    assert header.size == len(data)
    assert [(r.offset, r.key, r.value, r.headers, r.timestamp) for r in records] == [
        (base_offset + i, k, v, list(h), ts) for i, (k, v, h, ts) in enumerate(rows)
    ]
    # and kafka-python agrees on every field
    theirs = [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in MemoryRecords(data).next_batch()]
    assert theirs == [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in records]


@settings(max_examples=100, deadline=None)
@given(data=st.binary(max_size=200))
def test_property_garbage_never_escapes_as_another_error(data: bytes) -> None:
    try:
        list(decode_batches(data))
    except KafkaError:
        pass


def test_encode_batches_splits_to_fit_and_keeps_order() -> None:
    from loglake.record.batch import encode_batches

    rows = [(b"k%d" % i, b"x" * 1000, [], None) for i in range(100)]
    batches = encode_batches(rows, 0, 10_000)
    assert len(batches) > 10 and all(len(b) <= 10_000 for b in batches)
    values = [r.key for b in batches for _, rs in decode_batches(b) for r in rs]
    assert values == [r[0] for r in rows]
    with pytest.raises(KafkaError) as err:
        encode_batches([(b"k", b"x" * 20_000, [], None)], 0, 10_000)
    assert err.value.code == ErrorCode.MESSAGE_TOO_LARGE


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
def test_client_records_check_accepts_real_batches(codec: CompressionType) -> None:
    from loglake.record.batch import validate_client_records

    ours = encode_batch(ROWS, 0, compression=codec)
    theirs = _kafka_python_batch(codec, ROWS)
    validate_client_records(ours + theirs)


@pytest.mark.parametrize("claimed", [1, 3])
def test_client_records_check_refuses_a_count_the_records_do_not_match(claimed: int) -> None:
    from loglake.record.batch import validate_client_records

    data = bytearray(encode_batch(ROWS[:2], 0))
    struct.pack_into(">i", data, 57, claimed)
    struct.pack_into(">i", data, 23, claimed - 1)
    struct.pack_into(">I", data, 17, crc32c.crc32c(bytes(data[21:])))
    with pytest.raises(KafkaError) as err:
        validate_client_records(data)
    assert err.value.code == ErrorCode.INVALID_RECORD
    validate_batch(data)  # the header alone looks fine: only the records tell


@settings(max_examples=60, deadline=None)
@given(rows=st.lists(_row, min_size=1, max_size=30), codec=st.sampled_from(CODECS))
def test_property_client_records_check_accepts_what_we_encode(rows, codec) -> None:
    from loglake.record.batch import validate_client_records

    validate_client_records(encode_batch(rows, 0, compression=codec))
