"""Zig-zag varints as Kafka frames records with (protobuf's encoding, signed by zig-zag)."""

from __future__ import annotations

from loglake.errors import ErrorCode, KafkaError


def _encode_unsigned(n: int) -> bytes:
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


# Lengths, deltas and small values dominate: encoding them is a list lookup.
_SMALL = 1 << 14
SMALL_VARINTS: list[bytes] = [_encode_unsigned(n << 1) for n in range(_SMALL)]
"""`encode_varint(n)` for 0 <= n < 16384, for loops that inline the lookup."""
_MINUS_ONE = _encode_unsigned(1)


def encode_varint(n: int) -> bytes:
    """Zig-zag varint of a signed 64-bit value."""
    if 0 <= n < _SMALL:
        return SMALL_VARINTS[n]
    if n == -1:
        return _MINUS_ONE
    return _encode_unsigned(((n << 1) ^ (n >> 63)) & 0xFFFFFFFFFFFFFFFF)


def encode_unsigned_varint(n: int) -> bytes:
    if n < 0:
        raise ValueError(f"unsigned varint cannot hold {n}")
    return _encode_unsigned(n)


def varint_size(n: int) -> int:
    return len(encode_varint(n))


def decode_varint(buf: bytes | bytearray | memoryview, pos: int) -> tuple[int, int]:
    """(value, next position) of the zig-zag varint at `pos`."""
    value, pos = decode_unsigned_varint(buf, pos)
    return (value >> 1) ^ -(value & 1), pos


def decode_unsigned_varint(buf: bytes | bytearray | memoryview, pos: int) -> tuple[int, int]:
    try:
        b = buf[pos]
        if b < 0x80:
            return b, pos + 1
        value = b & 0x7F
        shift = 7
        while True:
            pos += 1
            b = buf[pos]
            value |= (b & 0x7F) << shift
            if b < 0x80:
                return value, pos + 1
            shift += 7
            if shift > 63:
                raise KafkaError(ErrorCode.CORRUPT_MESSAGE, "varint longer than 10 bytes")
    except IndexError:
        raise KafkaError(ErrorCode.CORRUPT_MESSAGE, "record data ends inside a varint") from None
