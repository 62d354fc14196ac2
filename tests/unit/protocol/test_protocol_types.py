"""Primitive types: varints against kafka-python and known vectors, strings, arrays, tagged fields."""

from __future__ import annotations

import io
import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kafka.protocol.schemas.fields.codecs.types import UnsignedVarInt32, VarInt32, VarInt64

from loglake.protocol import types as t
from loglake.protocol.errors import ProtocolDecodeError


def _written(write, value) -> bytes:  # type: ignore[no-untyped-def]
    out: list = []
    write(out, value)
    return b"".join(out)


@pytest.mark.parametrize(
    "n,encoded",
    [
        (0, b"\x00"),
        (1, b"\x01"),
        (127, b"\x7f"),
        (128, b"\x80\x01"),
        (300, b"\xac\x02"),
        (0xFFFFFFFF, b"\xff\xff\xff\xff\x0f"),
    ],
)
def test_unsigned_varint_vectors(n: int, encoded: bytes) -> None:
    assert _written(t.write_unsigned_varint, n) == encoded
    assert t.read_unsigned_varint(encoded + b"junk", 0) == (n, len(encoded))


@given(st.integers(0, 0xFFFFFFFF))
def test_unsigned_varint_matches_kafka_python(n: int) -> None:
    data = _written(t.write_unsigned_varint, n)
    assert data == UnsignedVarInt32.encode(n)
    assert t.read_unsigned_varint(data, 0) == (n, len(data))


@given(st.integers(-(1 << 31), (1 << 31) - 1))
def test_varint_matches_kafka_python(n: int) -> None:
    data = _written(t.write_varint, n)
    assert data == VarInt32.encode(n)
    assert t.read_varint(data, 0) == (n, len(data))


@given(st.integers(-(1 << 63), (1 << 63) - 1))
def test_varlong_matches_kafka_python(n: int) -> None:
    data = _written(t.write_varlong, n)
    assert data == VarInt64.encode(n)
    assert t.read_varlong(data, 0) == (n, len(data))
    assert VarInt64.decode(io.BytesIO(data)) == n


def test_varint_limits() -> None:
    with pytest.raises(ProtocolDecodeError):
        t.read_unsigned_varint(b"\xff\xff\xff\xff\xff\x01", 0)
    with pytest.raises(ValueError):
        t.write_varint([], 1 << 31)
    with pytest.raises(ValueError):
        t.write_unsigned_varint([], -1)


@pytest.mark.parametrize(
    "read,write,value",
    [
        (t.read_int8, t.write_int8, -128),
        (t.read_int16, t.write_int16, -2),
        (t.read_uint16, t.write_uint16, 65535),
        (t.read_int32, t.write_int32, -(1 << 31)),
        (t.read_uint32, t.write_uint32, (1 << 32) - 1),
        (t.read_int64, t.write_int64, (1 << 63) - 1),
        (t.read_float64, t.write_float64, -2.5),
        (t.read_bool, t.write_bool, True),
        (t.read_uuid, t.write_uuid, uuid.UUID(int=12345)),
        (t.read_uuid, t.write_uuid, t.ZERO_UUID),
        (t.read_string, t.write_string, "héllo"),
        (t.read_nullable_string, t.write_nullable_string, None),
        (t.read_compact_string, t.write_compact_string, ""),
        (t.read_compact_nullable_string, t.write_compact_nullable_string, None),
        (t.read_bytes, t.write_bytes, b"\x00\x01"),
        (t.read_nullable_bytes, t.write_nullable_bytes, None),
        (t.read_compact_bytes, t.write_compact_bytes, b"abc"),
        (t.read_compact_nullable_bytes, t.write_compact_nullable_bytes, None),
    ],
)
def test_primitive_round_trip(read, write, value) -> None:  # type: ignore[no-untyped-def]
    data = _written(write, value) + b"tail"
    assert read(data, 0) == (value, len(data) - 4)
    assert read(memoryview(data), 0) == (value, len(data) - 4)


def test_strings_and_bytes_wire_format() -> None:
    assert _written(t.write_string, "ab") == b"\x00\x02ab"
    assert _written(t.write_compact_string, "ab") == b"\x03ab"
    assert _written(t.write_nullable_string, None) == b"\xff\xff"
    assert _written(t.write_compact_nullable_bytes, None) == b"\x00"
    assert _written(t.write_bytes, b"z") == b"\x00\x00\x00\x01z"


def test_non_nullable_null_and_overlong_lengths_fail() -> None:
    with pytest.raises(ProtocolDecodeError, match="non-nullable"):
        t.read_string(b"\xff\xff", 0)
    with pytest.raises(ProtocolDecodeError, match="non-nullable"):
        t.read_compact_bytes(b"\x00", 0)
    with pytest.raises(ProtocolDecodeError, match="past the end"):
        t.read_string(b"\x00\x05abc", 0)
    with pytest.raises(ProtocolDecodeError, match="past the end"):
        t.read_compact_records(b"\x10abc", 0)


def test_records_are_views_and_refs_pass_through() -> None:
    data = b"\x00\x00\x00\x03xyz"
    records, pos = t.read_records(data, 0)
    assert isinstance(records, memoryview) and records.obj is data and pos == 7

    class Ref:
        size = 5

    ref = Ref()
    out: list = []
    t.write_compact_records(out, ref)
    assert out == [b"\x06", ref]
    out = []
    t.write_records(out, memoryview(b""))
    assert out == [b"\x00\x00\x00\x00"]  # nothing to send: no empty chunk


@pytest.mark.parametrize("compact", [False, True])
def test_arrays(compact: bool) -> None:
    strings = (t.array_reader(t.read_string, compact, True), t.array_writer(t.write_string, compact, True))
    ints = (t.fixed_array_reader("i", compact, False), t.fixed_array_writer("i", compact, False))
    for (read, write), value in [(strings, ["a", "bc"]), (strings, None), (strings, []), (ints, [1, -2, 3])]:
        data = _written(write, value)
        assert read(data, 0) == (value, len(data))
    with pytest.raises(ValueError):
        _written(ints[1], None)


def test_array_count_beyond_the_data_fails_fast() -> None:
    read = t.array_reader(t.read_int8, False, False)
    with pytest.raises(ProtocolDecodeError, match="only 2 bytes remain"):
        read(b"\x7f\xff\xff\xff\x00\x00", 0)
    with pytest.raises(ProtocolDecodeError):
        t.fixed_array_reader("q", True, False)(b"\xff\xff\xff\xff\x07", 0)
    with pytest.raises(ProtocolDecodeError, match="non-nullable"):
        read(b"\xff\xff\xff\xff", 0)


def test_tagged_fields() -> None:
    data = _written(t.write_tagged_fields, [(0, b"ab"), (300, b"")])
    assert data == b"\x02\x00\x02ab\xac\x02\x00"
    fields, pos = t.read_tagged_fields(data, 0)
    assert [(tag, bytes(raw)) for tag, raw in fields] == [(0, b"ab"), (300, b"")] and pos == len(data)
    with pytest.raises(ProtocolDecodeError):
        t.read_tagged_fields(b"\x01\x00\x05ab", 0)
