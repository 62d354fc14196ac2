"""Kafka's primitive wire types: big-endian integers, varints, strings, bytes, arrays, tagged fields.

Readers take `(buf, pos)` and return `(value, new_pos)`; `buf` is a memoryview (or bytes) of
the whole frame, so reading a slice never copies until a value is built. Writers append
pieces to `out`, a list that is joined once at the end (cheaper than growing one buffer
field by field in Python).

Readers are unchecked building blocks: a truncated buffer raises IndexError or struct.error
from here. The message-level entry points (schema, framing) turn every such failure into
ProtocolDecodeError; explicit checks here cover what slicing would silently accept (a length
past the end) or what would cost unbounded work (a huge array count).
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Callable
from typing import Any, Protocol

from loglake.protocol.errors import ProtocolDecodeError

Buffer = bytes | bytearray | memoryview
Reader = Callable[[Buffer, int], tuple[Any, int]]
Writer = Callable[[list, Any], None]


class RecordsRef(Protocol):
    """Record bytes that are not in memory (e.g. storage's LogSlice: a file range).

    A "records" field may hold one; encoding reserves its length and leaves the object in
    the chunk list for the server to send with os.sendfile.
    """

    @property
    def size(self) -> int: ...

    # Where the bytes are: the server sends `size` bytes of file descriptor `fd` from `position`.
    @property
    def fd(self) -> int: ...

    @property
    def position(self) -> int: ...


INT8 = struct.Struct(">b")
INT16 = struct.Struct(">h")
UINT16 = struct.Struct(">H")
INT32 = struct.Struct(">i")
UINT32 = struct.Struct(">I")
INT64 = struct.Struct(">q")
FLOAT64 = struct.Struct(">d")
BOOL = struct.Struct(">?")

ZERO_UUID = uuid.UUID(int=0)
_ZERO_UUID_BYTES = bytes(16)
_BYTES_LIKE = (bytes, bytearray, memoryview)
# Lengths and counts are nearly always small: one lookup instead of a loop.
_UVARINT_SMALL = [bytes((i,)) for i in range(0x80)]


def _fixed(st: struct.Struct) -> tuple[Reader, Writer]:
    unpack_from, pack, size = st.unpack_from, st.pack, st.size

    def read(buf: Buffer, pos: int) -> tuple[Any, int]:
        return unpack_from(buf, pos)[0], pos + size

    def write(out: list, value: Any) -> None:
        out.append(pack(value))

    return read, write


read_int8, write_int8 = _fixed(INT8)
read_int16, write_int16 = _fixed(INT16)
read_uint16, write_uint16 = _fixed(UINT16)
read_int32, write_int32 = _fixed(INT32)
read_uint32, write_uint32 = _fixed(UINT32)
read_int64, write_int64 = _fixed(INT64)
read_float64, write_float64 = _fixed(FLOAT64)
read_bool, write_bool = _fixed(BOOL)


# --- varints ---------------------------------------------------------------------------------


def read_unsigned_varint(buf: Buffer, pos: int) -> tuple[int, int]:
    b = buf[pos]
    if b < 0x80:
        return b, pos + 1
    result = b & 0x7F
    shift = 7
    while True:
        pos += 1
        b = buf[pos]
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos + 1
        shift += 7
        if shift > 28:  # Kafka's limit: an unsigned varint holds 32 bits, 5 bytes at most
            raise ProtocolDecodeError("unsigned varint longer than 5 bytes")


def _encode_unsigned(n: int) -> bytes:
    if n < 0x80:
        return _UVARINT_SMALL[n]
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def encode_unsigned_varint(n: int) -> bytes:
    if not 0 <= n <= 0xFFFFFFFF:
        raise ValueError(f"unsigned varint out of range: {n}")
    return _encode_unsigned(n)


def write_unsigned_varint(out: list, n: int) -> None:
    out.append(encode_unsigned_varint(n))


def _read_long_unsigned(buf: Buffer, pos: int, max_shift: int) -> tuple[int, int]:
    result = 0
    shift = 0
    while True:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7
        if shift > max_shift:
            raise ProtocolDecodeError("varint too long")


def read_varint(buf: Buffer, pos: int) -> tuple[int, int]:
    """Zig-zag signed 32-bit varint (record framing)."""
    n, pos = _read_long_unsigned(buf, pos, 28)
    return (n >> 1) ^ -(n & 1), pos


def read_varlong(buf: Buffer, pos: int) -> tuple[int, int]:
    """Zig-zag signed 64-bit varint."""
    n, pos = _read_long_unsigned(buf, pos, 63)
    return (n >> 1) ^ -(n & 1), pos


def write_varint(out: list, n: int) -> None:
    if not -(1 << 31) <= n < (1 << 31):
        raise ValueError(f"varint out of range: {n}")
    out.append(_encode_unsigned(((n << 1) ^ (n >> 31)) & 0xFFFFFFFF))


def write_varlong(out: list, n: int) -> None:
    if not -(1 << 63) <= n < (1 << 63):
        raise ValueError(f"varlong out of range: {n}")
    out.append(_encode_unsigned(((n << 1) ^ (n >> 63)) & 0xFFFFFFFFFFFFFFFF))


# --- uuid ------------------------------------------------------------------------------------


def read_uuid(buf: Buffer, pos: int) -> tuple[uuid.UUID, int]:
    end = pos + 16
    raw = bytes(buf[pos:end])
    if len(raw) != 16:
        raise ProtocolDecodeError("truncated uuid")
    return (ZERO_UUID if raw == _ZERO_UUID_BYTES else uuid.UUID(bytes=raw)), end


def write_uuid(out: list, value: uuid.UUID) -> None:
    out.append(value.bytes)


# --- strings and bytes -----------------------------------------------------------------------


def _span(buf: Buffer, pos: int, n: int, what: str) -> int:
    end = pos + n
    if end > len(buf):
        raise ProtocolDecodeError(f"{what} of {n} bytes runs past the end of the buffer")
    return end


def _null(what: str) -> ProtocolDecodeError:
    return ProtocolDecodeError(f"non-nullable {what} is null")


def read_string(buf: Buffer, pos: int) -> tuple[str, int]:
    n = INT16.unpack_from(buf, pos)[0]
    if n < 0:
        raise _null("string")
    end = _span(buf, pos + 2, n, "string")
    return str(buf[pos + 2 : end], "utf-8"), end


def read_nullable_string(buf: Buffer, pos: int) -> tuple[str | None, int]:
    n = INT16.unpack_from(buf, pos)[0]
    if n < 0:
        return None, pos + 2
    end = _span(buf, pos + 2, n, "string")
    return str(buf[pos + 2 : end], "utf-8"), end


def read_compact_string(buf: Buffer, pos: int) -> tuple[str, int]:
    n, pos = read_unsigned_varint(buf, pos)
    if n == 0:
        raise _null("string")
    end = _span(buf, pos, n - 1, "string")
    return str(buf[pos:end], "utf-8"), end


def read_compact_nullable_string(buf: Buffer, pos: int) -> tuple[str | None, int]:
    n, pos = read_unsigned_varint(buf, pos)
    if n == 0:
        return None, pos
    end = _span(buf, pos, n - 1, "string")
    return str(buf[pos:end], "utf-8"), end


def write_string(out: list, value: str) -> None:
    b = value.encode()
    out.append(INT16.pack(len(b)))
    out.append(b)


def write_nullable_string(out: list, value: str | None) -> None:
    if value is None:
        out.append(b"\xff\xff")
    else:
        write_string(out, value)


def write_compact_string(out: list, value: str) -> None:
    b = value.encode()
    out.append(_encode_unsigned(len(b) + 1))
    out.append(b)


def write_compact_nullable_string(out: list, value: str | None) -> None:
    if value is None:
        out.append(b"\x00")
    else:
        write_compact_string(out, value)


def read_bytes(buf: Buffer, pos: int) -> tuple[bytes, int]:
    n = INT32.unpack_from(buf, pos)[0]
    if n < 0:
        raise _null("bytes")
    end = _span(buf, pos + 4, n, "bytes")
    return bytes(buf[pos + 4 : end]), end


def read_nullable_bytes(buf: Buffer, pos: int) -> tuple[bytes | None, int]:
    n = INT32.unpack_from(buf, pos)[0]
    if n < 0:
        return None, pos + 4
    end = _span(buf, pos + 4, n, "bytes")
    return bytes(buf[pos + 4 : end]), end


def read_compact_bytes(buf: Buffer, pos: int) -> tuple[bytes, int]:
    n, pos = read_unsigned_varint(buf, pos)
    if n == 0:
        raise _null("bytes")
    end = _span(buf, pos, n - 1, "bytes")
    return bytes(buf[pos:end]), end


def read_compact_nullable_bytes(buf: Buffer, pos: int) -> tuple[bytes | None, int]:
    n, pos = read_unsigned_varint(buf, pos)
    if n == 0:
        return None, pos
    end = _span(buf, pos, n - 1, "bytes")
    return bytes(buf[pos:end]), end


def write_bytes(out: list, value: Buffer) -> None:
    out.append(INT32.pack(len(value)))
    out.append(value)


def write_nullable_bytes(out: list, value: Buffer | None) -> None:
    if value is None:
        out.append(b"\xff\xff\xff\xff")
    else:
        write_bytes(out, value)


def write_compact_bytes(out: list, value: Buffer) -> None:
    out.append(_encode_unsigned(len(value) + 1))
    out.append(value)


def write_compact_nullable_bytes(out: list, value: Buffer | None) -> None:
    if value is None:
        out.append(b"\x00")
    else:
        write_compact_bytes(out, value)


# --- records: never parsed here --------------------------------------------------------------
# Decoding returns a memoryview slice of the frame (no copy); encoding accepts bytes-like
# values or a RecordsRef, which is appended to `out` as is for the server to send from disk.


def read_records(buf: Buffer, pos: int) -> tuple[memoryview | None, int]:
    n = INT32.unpack_from(buf, pos)[0]
    if n < 0:
        return None, pos + 4
    end = _span(buf, pos + 4, n, "records")
    return memoryview(buf)[pos + 4 : end], end


def read_compact_records(buf: Buffer, pos: int) -> tuple[memoryview | None, int]:
    n, pos = read_unsigned_varint(buf, pos)
    if n == 0:
        return None, pos
    end = _span(buf, pos, n - 1, "records")
    return memoryview(buf)[pos:end], end


def records_size(value: Buffer | RecordsRef) -> int:
    return len(value) if isinstance(value, _BYTES_LIKE) else value.size


def write_records(out: list, value: Buffer | RecordsRef | None) -> None:
    if value is None:
        out.append(b"\xff\xff\xff\xff")
        return
    n = records_size(value)
    out.append(INT32.pack(n))
    if n:
        out.append(value)


def write_compact_records(out: list, value: Buffer | RecordsRef | None) -> None:
    if value is None:
        out.append(b"\x00")
        return
    n = records_size(value)
    out.append(_encode_unsigned(n + 1))
    if n:
        out.append(value)


# --- arrays ----------------------------------------------------------------------------------


def _check_count(buf: Buffer, pos: int, n: int) -> None:
    # Kafka's own guard: every element takes at least one byte, so a count beyond the bytes
    # left is garbage; without it a forged count would allocate or loop without bound.
    if n > len(buf) - pos:
        raise ProtocolDecodeError(f"array of {n} elements but only {len(buf) - pos} bytes remain")


def array_reader(element: Reader, compact: bool, nullable: bool) -> Reader:
    def read(buf: Buffer, pos: int) -> tuple[list | None, int]:
        if compact:
            n, pos = read_unsigned_varint(buf, pos)
            n -= 1
        else:
            n = INT32.unpack_from(buf, pos)[0]
            pos += 4
        if n < 0:
            if nullable:
                return None, pos
            raise _null("array")
        _check_count(buf, pos, n)
        items: list = []
        append = items.append
        for _ in range(n):
            item, pos = element(buf, pos)
            append(item)
        return items, pos

    return read


def _array_structs(code: str) -> list[struct.Struct]:
    # Replica lists and partition ids are short: one prepared Struct per small length.
    return [struct.Struct(f">{n}{code}") for n in range(_SMALL_ARRAY)]


_SMALL_ARRAY = 32


def fixed_array_reader(code: str, compact: bool, nullable: bool) -> Reader:
    """An array of one fixed-width type (struct format `code`, e.g. "i"), read in one unpack."""
    structs = _array_structs(code)
    size = structs[1].size

    def read(buf: Buffer, pos: int) -> tuple[list | None, int]:
        if compact:
            n = buf[pos] - 1
            pos += 1
            if n >= 0x7F:  # a longer varint
                n, pos = read_unsigned_varint(buf, pos - 1)
                n -= 1
        else:
            n = INT32.unpack_from(buf, pos)[0]
            pos += 4
        if n < 0:
            if nullable:
                return None, pos
            raise _null("array")
        end = pos + n * size
        if end > len(buf):
            raise ProtocolDecodeError(f"array of {n} elements runs past the end of the buffer")
        st = structs[n] if n < _SMALL_ARRAY else struct.Struct(f">{n}{code}")
        return list(st.unpack_from(buf, pos)), end

    return read


def fixed_array_writer(code: str, compact: bool, nullable: bool) -> Writer:
    structs = _array_structs(code)

    def write(out: list, value: list | None) -> None:
        if value is None:
            if not nullable:
                raise ValueError("non-nullable array is None")
            out.append(b"\x00" if compact else b"\xff\xff\xff\xff")
            return
        n = len(value)
        out.append(_encode_unsigned(n + 1) if compact else INT32.pack(n))
        out.append((structs[n] if n < _SMALL_ARRAY else struct.Struct(f">{n}{code}")).pack(*value))

    return write


def array_writer(element: Writer, compact: bool, nullable: bool) -> Writer:
    def write(out: list, value: list | None) -> None:
        if value is None:
            if not nullable:
                raise ValueError("non-nullable array is None")
            out.append(b"\x00" if compact else b"\xff\xff\xff\xff")
            return
        out.append(_encode_unsigned(len(value) + 1) if compact else INT32.pack(len(value)))
        for item in value:
            element(out, item)

    return write


# --- tagged fields ---------------------------------------------------------------------------


def read_tagged_fields(buf: Buffer, pos: int) -> tuple[list[tuple[int, memoryview]], int]:
    """The tagged-field section of a flexible struct: (tag, raw value) pairs, in wire order."""
    n, pos = read_unsigned_varint(buf, pos)
    if n == 0:
        return [], pos
    _check_count(buf, pos, n)
    fields = []
    mv = memoryview(buf)
    for _ in range(n):
        tag, pos = read_unsigned_varint(buf, pos)
        size, pos = read_unsigned_varint(buf, pos)
        end = _span(buf, pos, size, "tagged field")
        fields.append((tag, mv[pos:end]))
        pos = end
    return fields, pos


def write_tagged_fields(out: list, fields: list[tuple[int, bytes]]) -> None:
    """`fields` must be sorted by tag (Kafka requires ascending, unique tags)."""
    out.append(_encode_unsigned(len(fields)))
    for tag, raw in fields:
        out.append(_encode_unsigned(tag))
        out.append(_encode_unsigned(len(raw)))
        out.append(raw)
